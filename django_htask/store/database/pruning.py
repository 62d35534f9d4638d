"""The ORM store's pruner: finished tasks past their retention deleted with their runs
(and their edges to the tasks they waited for, and their batch's row once it is spent:
finished, its last member gone), then old runs, then the rows of nodes stopped long
ago, a short transaction at a time (:meth:`PruneRows.prune`), and the counts of what
it would delete (:meth:`PruneRows.expired`).

Every statement reads a range of an index: the tasks through the pruner's index
(``retention, status, finished_at``, partial on the finished ones), one range per
final status and per retention of a function's own, each read in the order rows ended;
the runs of those tasks by ``task_id``; old runs by ``started_at``. None reads every
finished row, so a prune costs what it deletes, not what the table holds.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from django_htask.models import Node, Run, Task
from django_htask.querysets import (
    EXPIRED_TASK_SQL,
    OWN_EXPIRED_TASK_SQL,
    expired_run,
    expired_task,
)
from django_htask.retention import FINAL_STATUSES, Cutoffs
from django_htask.store.values import Pruned

from .core import _NODE, _TASK, OrmStore

__all__ = ["PruneRows"]


class PruneRows(OrmStore):
    """Deleting what is past its retention (see the module)."""

    #: Appended to the read of the tasks a batch deletes: rows another transaction
    #: holds (a failed task being sent again) are left for the next batch.
    @property
    def _skip_held(self) -> str:
        features = self.connection.features
        return " FOR UPDATE SKIP LOCKED" if features.has_select_for_update_skip_locked else ""

    def prune(self, node_id: str, cutoffs: Cutoffs, limit: int) -> Pruned | None:
        adapt = self.connection.ops.adapt_datetimefield_value
        with self._atomic(), self.connection.cursor() as cursor:
            if not self.dialect.try_lock_pruner(self):
                return None
            tasks = runs = 0
            for condition, params in self._expired_ranges(cursor, cutoffs):
                values = [adapt(p) if isinstance(p, datetime) else p for p in params]
                deleted, their_runs = self.dialect.delete_expired(
                    self, cursor, condition, values, limit - tasks
                )
                tasks, runs = tasks + deleted, runs + their_runs
                if tasks >= limit:
                    break
            more = tasks >= limit
            if not more and cutoffs.runs is not None:
                old = self.dialect.delete_runs(self, cursor, adapt(cutoffs.runs), limit - tasks)
                runs += old
                more = old >= limit - tasks
            nodes = 0
            if not more and cutoffs.runs is not None:
                nodes = self._delete_stopped_nodes(cursor, adapt(cutoffs.runs))
            if not more:
                more = self.dialect.delete_slots(self, cursor, adapt(cutoffs.now), limit) >= limit
            pruned = Pruned(tasks, runs, nodes, more)
            if pruned.rows:
                cursor.execute(
                    f"UPDATE {_NODE} SET pruned_tasks = pruned_tasks + %s, "
                    "pruned_runs = pruned_runs + %s, pruned_at = %s WHERE id = %s",
                    [tasks, runs, adapt(cutoffs.now), node_id],
                )
        return pruned

    def _delete_stopped_nodes(self, cursor: Any, before: Any) -> int:
        """Delete the rows of nodes stopped before ``before``. Their ids are read first
        and the rows deleted by id: a DELETE filtered on ``stopped_at`` (no index)
        would lock every node row InnoDB reads, the live nodes' too, and deadlock with
        a reaper that holds its own row and declares another dead."""
        cursor.execute(f"SELECT id FROM {_NODE} WHERE stopped_at < %s", [before])
        ids = [row[0] for row in cursor.fetchall()]
        delete = f"DELETE FROM {_NODE} WHERE stopped_at < %s AND id"
        return self._delete_ids(cursor, delete, ids, [before])

    def _batches_of(self, cursor: Any, ids: list[int]) -> list[int]:
        """The batches of the tasks ``ids`` (read through the batch index: the ids of
        a batch's members are a range of it only for those in one)."""
        found: set[int] = set()
        chunk = self.connection.features.max_query_params or len(ids) or 1
        for i in range(0, len(ids), chunk):
            part = ids[i : i + chunk]
            cursor.execute(
                f"SELECT DISTINCT batch_id FROM {_TASK} WHERE batch_id IS NOT NULL "
                f"AND id IN ({', '.join(['%s'] * len(part))})",
                part,
            )
            found.update(row[0] for row in cursor.fetchall())
        return sorted(found)

    def _expired_ranges(self, cursor: Any, cutoffs: Cutoffs) -> Iterator[tuple[str, list[Any]]]:
        """The ranges of the pruner's index that hold tasks past their retention, as
        conditions and parameters: one per final status kept for a time, then one per
        status and retention of a function's own."""
        for status, cutoff in cutoffs.tasks:
            yield EXPIRED_TASK_SQL, [status, cutoff]
        for seconds in self._own_retentions(cursor):
            before = cutoffs.own(seconds)
            if before is not None:
                for status in FINAL_STATUSES:
                    yield OWN_EXPIRED_TASK_SQL, [seconds, str(status), before]

    def _own_retentions(self, cursor: Any) -> list[int]:
        """The retentions of their own that finished tasks have, read as a walk of the
        index: one short read per distinct value (a handful), never the rows."""
        found: list[int] = []
        while True:
            cursor.execute(
                f"SELECT MIN(retention) FROM {_TASK} WHERE retention > %s "
                "AND finished_at IS NOT NULL",
                [found[-1] if found else -1],
            )
            row = cursor.fetchone()
            if row is None or row[0] is None:
                return found
            found.append(int(row[0]))

    def _delete_ids(
        self, cursor: Any, delete: str, ids: list[Any], params: Sequence[Any] = ()
    ) -> int:
        """Run ``delete … IN (ids)`` (``params`` are those of ``delete``), in as few
        statements as the database takes parameters for; how many rows it deleted."""
        deleted = 0
        most = self.connection.features.max_query_params
        chunk = most - len(params) if most else len(ids) or 1
        for i in range(0, len(ids), chunk):
            part = ids[i : i + chunk]
            cursor.execute(f"{delete} IN ({', '.join(['%s'] * len(part))})", [*params, *part])
            deleted += cursor.rowcount
        return deleted

    def expired(self, cutoffs: Cutoffs) -> Pruned:
        with self.connection.cursor() as cursor:
            own = self._own_retentions(cursor)
        tasks = Task.objects.using(self.using).filter(expired_task(cutoffs, own))
        old_runs = expired_run(cutoffs.runs)
        runs = Run.objects.using(self.using)
        # Two counts, each a range of an index, rather than one OR of both.
        counted_runs = runs.filter(old_runs).count()
        counted_runs += runs.filter(task__in=tasks).exclude(old_runs).count()
        nodes = 0
        if cutoffs.runs is not None:
            nodes = Node.objects.using(self.using).filter(stopped_at__lt=cutoffs.runs).count()
        return Pruned(tasks.count(), counted_runs, nodes)
