"""The in-memory store's nodes: registration, heartbeats and leases, a node's
departure, who is live, and the reaper (the rules it applies: :mod:`~django_htask.store.rules`)."""

from __future__ import annotations

from datetime import datetime

from django_htask.enums import RunStatus, TaskStatus
from django_htask.querysets import lease_due, node_is_silent, task_is_lost
from django_htask.queues import QueueFilter
from django_htask.retry import RetryPolicy
from django_htask.store import rules, values

from .records import MemoryTables, NodeRecord, _set


class MemoryNodes(MemoryTables):
    """The node rows, and what a node that left or died held."""

    def _register(self, r: values.Registration) -> None:
        node_id, hostname, pid, version, now, queues = r
        with self._lock:
            self.nodes[node_id] = NodeRecord(node_id, hostname, pid, version, now, now, str(queues))
            self.sessions.add(node_id)
        self._notify("node")

    def heartbeat(
        self,
        node_id: str,
        now: datetime,
        lease_until: datetime,
        stuck: int = 0,
        renew_below: datetime | None = None,
    ) -> int:
        with self._lock:
            node = self._fence(node_id)
            node.last_heartbeat = now
            node.stuck_threads = stuck
            self.sessions.add(node_id)
            return self._renew(node_id, lease_until, renew_below or lease_until)

    def _renew(self, node_id: str, lease_until: datetime, renew_below: datetime) -> int:
        renewed = 0
        for task in self.tasks.values():
            if (
                task.locked_by == node_id
                and task.status in (TaskStatus.PENDING, TaskStatus.RUNNING)
                and lease_due(task.lease_expires_at, renew_below)
            ):
                task.lease_expires_at = lease_until
                renewed += 1
        return renewed

    def stop_node(self, node_id: str, now: datetime) -> None:
        with self._lock:
            node = self.nodes.get(node_id)
            if node is not None and node.stopped_at is None:
                node.stopped_at = now
        self._notify("node")

    def _abandon(self, departure: values.Departure) -> None:
        node_id, now, abandoned, dead_at, heartbeat_at = departure
        with self._lock:
            node = self._fence(node_id)
            for left in abandoned:
                if left.run_id is not None:
                    run = self.runs.get(left.run_id)
                    if run is not None and run.status == RunStatus.RUNNING:
                        _set(run, rules.abandoned_run(left, now))
                    continue
                task = self.tasks.get(left.task_id or 0)
                if task is None or task.locked_by != node_id or task.status != TaskStatus.RUNNING:
                    continue
                if left.started:
                    self._run(rules.crashed_run(task, task.id, node_id, now, left.error))
                self._write(task, rules.abandoned_task(left, task.attempts, now, dead_at), now)
            if self._follow_ended(now):
                self._notify("task")
            node.last_heartbeat = heartbeat_at

    def live_nodes(self, dead_before: datetime) -> dict[str, tuple[datetime, QueueFilter]]:
        with self._lock:
            live = sorted(self._live(dead_before))
            return {
                i: (self.nodes[i].last_heartbeat, QueueFilter.parse(self.nodes[i].queues))
                for i in live
            }

    def nodes_on_host(self, hostname: str) -> list[tuple[str, int]]:
        with self._lock:
            return [
                (n.id, n.pid)
                for n in self.nodes.values()
                if n.hostname == hostname and n.stopped_at is None
            ]

    def absent(self, node_ids: list[str]) -> list[str]:
        with self._lock:
            return sorted(i for i in node_ids if i not in self.sessions)

    def declare_dead(self, node_ids: list[str], now: datetime) -> int:
        with self._lock:
            dead = [self.nodes[i] for i in node_ids if i in self.nodes]
            count = 0
            for node in dead:
                if node.stopped_at is None:
                    node.stopped_at = now
                    count += 1
            return count

    def take_over(
        self, node_id: str, now: datetime, dead_before: datetime, retry: RetryPolicy
    ) -> int:
        with self._lock:
            node = self.nodes.get(node_id)
            if node is None or node.stopped_at is not None:
                return 0
            node.stopped_at = now
            count, _dead_nodes = self._reap(now, dead_before, retry)
        self._reaped(count, 1)
        return count

    def reap(self, node_id: str, now: datetime, dead_before: datetime, retry: RetryPolicy) -> int:
        with self._lock:
            self._fence(node_id)
            count, dead_nodes = self._reap(now, dead_before, retry)
        self._reaped(count, dead_nodes)
        return count

    def _reaped(self, count: int, dead_nodes: int) -> None:
        if count > dead_nodes:
            self._notify("task")
        if dead_nodes:
            self._notify("node")

    def _reap(self, now: datetime, dead_before: datetime, retry: RetryPolicy) -> tuple[int, int]:
        """The reaper's work, with the lock held (see :meth:`reap`): the rows changed and
        the nodes declared dead."""
        count = 0
        for node in self.nodes.values():
            if node_is_silent(node.stopped_at, node.last_heartbeat, dead_before):
                node.stopped_at = now
                count += 1
        dead_nodes = count
        live = self._live(dead_before)
        for task in self.tasks.values():
            if not task_is_lost(task.locked_by, task.lease_expires_at, live, now):
                continue
            if task.status == TaskStatus.RUNNING:
                changes = rules.reaped_task(task, task.locked_by, task.retry, retry, now)
                holder = task.locked_by or "?"
                self._run(rules.crashed_run(task, task.id, holder, now, changes["last_error"]))
                self._write(task, changes, now)
                count += 1
            elif task.status == TaskStatus.PENDING and task.locked_by is not None:
                _set(task, rules.UNLOCKED)
                count += 1
        for run in self.runs.values():
            if run.status == RunStatus.RUNNING and run.node not in live:
                run.status, run.finished_at = RunStatus.FAILED, now
                run.error = rules.lost_run_error(run.error)
                count += 1
        if self._follow_ended(now):
            self._notify("task")
        return count, dead_nodes
