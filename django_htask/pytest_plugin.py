"""pytest fixtures for projects that use django_htask (loaded by pytest through the
package's ``pytest11`` entry point; pytest-django provides the database).

* ``htask_eager``: ``HTASK["EAGER"]`` on for the test (the other ``HTASK`` keys kept):
  a task due now runs in the test's process once scheduled (:mod:`django_htask.eager`).
* ``htask_clock``: a :class:`~django_htask.engine.FakeClock` that django_htask reads
  (``schedule(delay=...)``, due times, :func:`~django_htask.testing.drain`), at
  2030-01-01 00:00 UTC; ``htask_clock.advance(seconds)`` moves it.

Nothing is imported from Django or django_htask until a fixture is used: pytest loads
this module before Django is set up.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from django_htask.engine import FakeClock

__all__ = ["htask_clock", "htask_eager"]

#: Where ``htask_clock`` starts: a fixed instant, so that a test's times never depend
#: on the day it runs.
CLOCK_START = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture
def htask_eager() -> Iterator[None]:
    """``HTASK["EAGER"]`` on for the test."""
    from django.conf import settings  # noqa: PLC0415
    from django.test import override_settings  # noqa: PLC0415

    current = dict(getattr(settings, "HTASK", None) or {})
    with override_settings(HTASK={**current, "EAGER": True}):
        yield


@pytest.fixture
def htask_clock() -> Iterator[FakeClock]:
    """A fake clock for django_htask, from 2030-01-01 00:00 UTC."""
    from django_htask.clock import use_clock  # noqa: PLC0415
    from django_htask.engine import FakeClock  # noqa: PLC0415

    clock = FakeClock(CLOCK_START)
    with use_clock(clock):
        yield clock
