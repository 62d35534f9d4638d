"""Change lists over tables that may hold months of history: counted exactly up to
:data:`EXACT` rows, estimated past it.

Django's admin counts every row a list shows (``SELECT COUNT(*)``) to number its pages,
and a second time for the total beside a search: on a table of millions of finished
tasks each count reads them all, seconds a page. Here a count reads at most
:data:`EXACT` + 1 rows; past that the database's own estimate of the list's rows is
shown (PostgreSQL's and MySQL's planners), or :data:`EXACT` + 1 where it has none
(SQLite); the list then says its count is an estimate
(``templates/admin/django_htask/change_list.html``).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.core.paginator import Paginator
from django.db.models import QuerySet

from django_htask.store import get_store

__all__ = ["EXACT", "LargeTablePaginator"]

#: Rows counted exactly.
EXACT = 10_000


class LargeTablePaginator(Paginator):  # type: ignore[type-arg]
    """A paginator whose count reads at most :data:`EXACT` + 1 rows (see the module).
    :attr:`estimated` says whether :attr:`count` is an estimate."""

    estimated = False

    @property
    def exact_limit(self) -> str:
        """For the template: the rows counted exactly."""
        return f"{EXACT:,}"

    @cached_property
    def count(self) -> int:
        rows: QuerySet[Any] = self.object_list  # type: ignore[assignment]
        exact = rows.order_by()[: EXACT + 1].count()
        if exact <= EXACT:
            return exact
        self.estimated = True
        estimate = get_store(rows.db).estimate_rows(rows.order_by())
        return max(estimate or 0, exact)
