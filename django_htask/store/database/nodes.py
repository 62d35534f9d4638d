"""The ORM store's nodes: registration, heartbeats and leases, a node's departure,
who is live, and the reaper of the nodes that stopped answering."""

from __future__ import annotations

from datetime import datetime
from functools import partial
from typing import Any

from django.db.models import Case, F, TextField, Value, When

from django_htask.models import Node, Run, RunStatus, Task, TaskStatus
from django_htask.queues import QueueFilter
from django_htask.retry import RetryPolicy
from django_htask.store import base, rules, values

from .following import FollowRows
from .putback import put_back


class NodeRows(FollowRows):
    """The node rows, and what a node that left or died held."""

    def _register(self, r: values.Registration) -> None:
        node_id, hostname, pid, version, now, queues = r
        Node.objects.using(self.using).update_or_create(
            id=node_id,
            defaults={
                "hostname": hostname,
                "pid": pid,
                "version": version,
                "started_at": now,
                "last_heartbeat": now,
                "stopped_at": None,
                "queues": str(queues),
                "stuck_threads": 0,
            },
        )
        self.dialect.hold_presence(self, node_id)

    def heartbeat(
        self,
        node_id: str,
        now: datetime,
        lease_until: datetime,
        stuck: int = 0,
        renew_below: datetime | None = None,
    ) -> int:
        with self._fenced(node_id):
            Node.objects.using(self.using).filter(id=node_id).update(
                last_heartbeat=now, stuck_threads=stuck
            )
            return self._renew_leases(node_id, lease_until, renew_below)

    def _renew_leases(
        self, node_id: str, lease_until: datetime, renew_below: datetime | None
    ) -> int:
        return (
            Task.objects.using(self.using)
            .filter(locked_by=node_id, status__in=(TaskStatus.PENDING, TaskStatus.RUNNING))
            .lease_due(renew_below or lease_until)
            .update(lease_expires_at=lease_until)
        )

    def stop_node(self, node_id: str, now: datetime) -> None:
        Node.objects.using(self.using).not_stopped().filter(id=node_id).update(stopped_at=now)

    def _abandon(self, departure: values.Departure) -> None:
        node_id, now, abandoned, dead_at, heartbeat_at = departure
        tasks = Task.objects.using(self.using)
        with self._fenced(node_id):
            runs = Run.objects.using(self.using)
            task_ids = [left.task_id for left in abandoned if left.task_id is not None]
            still_running = {
                t.pk: t
                for t in tasks.filter(
                    id__in=task_ids, locked_by=node_id, status=TaskStatus.RUNNING
                ).only("id", "function", "attempts", "max_attempts", "run_at", "started_at")
            }
            new_runs = []
            for left in abandoned:
                if left.run_id is not None:
                    runs.filter(id=left.run_id, status=RunStatus.RUNNING).update(
                        **rules.abandoned_run(left, now)
                    )
                    continue
                task = still_running.get(left.task_id or 0)
                if task is None:
                    continue
                if left.started:
                    new_runs.append(
                        self._run(rules.crashed_run(task, task.pk, node_id, now, left.error))
                    )
                changes = rules.abandoned_task(left, task.attempts, now, dead_at)
                self._end_lost(task.pk, changes, now, locked_by=node_id)
            runs.bulk_create(new_runs)
            self._follow_ends(self._ended_followed(list(still_running)), now)
            # Dead at dead_at, not before: until then the others count its runs as going on.
            Node.objects.using(self.using).filter(id=node_id).update(last_heartbeat=heartbeat_at)

    def _end_lost(self, task_id: int, changes: dict[str, Any], now: datetime, **where: Any) -> int:
        """Write a rule's ``changes`` (:mod:`~django_htask.store.rules`) on the running
        task ``task_id`` (if it still matches ``where``): put back to pending through
        :func:`put_back` (superseded by a pending task holding its key); return the rows
        changed."""
        mine = Task.objects.using(self.using).filter(id=task_id, status=TaskStatus.RUNNING, **where)
        if changes["status"] != TaskStatus.PENDING:
            return mine.update(**changes)
        return sum(
            put_back(
                self.using, [task_id], TaskStatus.RUNNING, now, partial(mine.update, **changes)
            )
        )

    def live_nodes(self, dead_before: datetime) -> dict[str, tuple[datetime, QueueFilter]]:
        rows = (
            Node.objects.using(self.using)
            .live(dead_before)
            .order_by("id")
            .values_list("id", "last_heartbeat", "queues")
        )
        return {i: (beat, QueueFilter.parse(queues)) for i, beat, queues in rows}

    def nodes_on_host(self, hostname: str) -> list[tuple[str, int]]:
        return list(
            Node.objects.using(self.using)
            .not_stopped()
            .filter(hostname=hostname)
            .values_list("id", "pid")
        )

    def absent(self, node_ids: list[str]) -> list[str]:
        """None: the processes of one host sharing a database file have no session to
        look at (a node gone there is found by its process id, :meth:`nodes_on_host`)."""
        return []

    def declare_dead(self, node_ids: list[str], now: datetime) -> int:
        if not node_ids:
            return 0
        return (
            Node.objects.using(self.using)
            .not_stopped()
            .filter(id__in=node_ids)
            .update(stopped_at=now)
        )

    def reap(self, node_id: str, now: datetime, dead_before: datetime, retry: RetryPolicy) -> int:
        with self._fenced(node_id):
            return self._reap(now, dead_before, retry)

    def take_over(
        self, node_id: str, now: datetime, dead_before: datetime, retry: RetryPolicy
    ) -> int:
        with self._atomic():
            self.dialect.lock_reaper(self)
            stopped = (
                Node.objects.using(self.using)
                .not_stopped()
                .filter(id=node_id)
                .update(stopped_at=now)
            )
            return self._reap(now, dead_before, retry) if stopped else 0

    def _reap(self, now: datetime, dead_before: datetime, retry: RetryPolicy) -> int:
        """The reaper's work, in the caller's transaction (see :meth:`Store.reap`).

        The node rows are written first: a node's own writes lock its row first too,
        so the two never wait for each other in the opposite order."""
        nodes = Node.objects.using(self.using)
        tasks = Task.objects.using(self.using)
        count = nodes.silent(dead_before).update(stopped_at=now)
        live = nodes.live(dead_before).values("id")
        crashed = list(
            tasks.lost(now, live)
            .filter(status=TaskStatus.RUNNING)
            .only(
                "id",
                "function",
                "attempts",
                "max_attempts",
                "run_at",
                "started_at",
                "locked_by",
                "abort_requested_at",
                *base.RETRY_COLUMNS,
            )
        )
        runs = []
        for task in crashed:
            if task.started_at is None:  # it waited in the node's buffer: never begun
                count += self._end_lost(task.pk, rules.unstarted_task(task.attempts), now)
                continue
            columns = base.RetryColumns(*(getattr(task, name) for name in base.RETRY_COLUMNS))
            changes = rules.reaped_task(task, task.locked_by, columns, retry, now)
            holder = task.locked_by or "?"
            runs.append(
                self._run(rules.crashed_run(task, task.pk, holder, now, changes["last_error"]))
            )
            count += self._end_lost(task.pk, changes, now)
        Run.objects.using(self.using).bulk_create(runs)
        if crashed:
            self._follow_ends(self._ended_followed([task.pk for task in crashed]), now)
        # Rows found by a plain read first, then written by id: an UPDATE that scans
        # would lock, on MySQL/MariaDB, rows it then leaves alone (the live nodes'
        # tasks and runs, which their nodes are writing), and deadlock with them.
        claimed = tasks.lost(now, live).filter(status=TaskStatus.PENDING, locked_by__isnull=False)
        if ids := list(claimed.values_list("id", flat=True)):
            count += claimed.filter(id__in=ids).update(**rules.UNLOCKED)
        all_runs = Run.objects.using(self.using)
        cut = all_runs.filter(status=RunStatus.RUNNING).exclude(node__in=live)
        if ids := list(cut.values_list("id", flat=True)):
            count += all_runs.filter(id__in=ids, status=RunStatus.RUNNING).update(
                status=RunStatus.FAILED,
                finished_at=now,
                error=Case(  # rules.lost_run_error, in SQL
                    When(error="", then=Value(rules.lost_run_error(""))),
                    default=F("error"),
                    output_field=TextField(),
                ),
            )
        return count
