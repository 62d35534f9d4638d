"""Writing schedules' last statuses without deadlocking with other writers of the
schedule table (the PostgreSQL and the MySQL/MariaDB stores).

A transaction that locks several schedule rows and waits for one more can deadlock
with any other that does (``Schedule.objects.update(...)`` in the admin): so the batch
written with the run rows never waits (rows another transaction holds are skipped),
and the rows it skipped are written afterwards one per transaction, which holds
nothing else while it waits.
"""

from __future__ import annotations

import abc
import logging
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError

__all__ = ["LateStatuses"]

logger = logging.getLogger(__name__)


class LateStatuses(abc.ABC):
    """The late half of the status writes; a store defines :meth:`_set_statuses`.
    Listed before :class:`~django_htask.store.database.DatabaseStore` in a store's
    bases, so its :meth:`_record_late` replaces the generic one."""

    if TYPE_CHECKING:  # the store's (DatabaseStore._atomic), after this in the bases

        def _atomic(self) -> AbstractContextManager[Any]: ...

    @abc.abstractmethod
    def _set_statuses(self, statuses: dict[int, tuple[str, datetime]], *, wait: bool) -> list[int]:
        """Write each schedule's last status and run time, unless a later run already
        did. With ``wait=False``, rows another transaction holds are skipped, not waited
        for; return their ids."""

    def _record_late(self, statuses: dict[int, tuple[str, datetime]]) -> None:
        """The last statuses the batch skipped, one schedule per transaction."""
        for schedule_id, status in statuses.items():
            try:
                with self._atomic():
                    self._set_statuses({schedule_id: status}, wait=True)
            except DatabaseError as exc:  # the runs are written: only the summary is late
                logger.warning(
                    "could not write the last status of schedule %s: %s",
                    schedule_id,
                    exc,
                    extra={"action": "status_unrecorded"},
                )
                return
