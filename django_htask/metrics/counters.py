"""Collecting what one node did in this process: :class:`NodeMetrics`, fed by the
node's signals (the node does not know of metrics)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django_htask.signals import rows_pruned, rows_reaped, run_finished, run_started

from .prometheus import DURATION_BUCKETS, require_prometheus

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["NodeMetrics"]


class NodeMetrics:
    """The counters of the node ``node_id`` in this process, on ``registry``: its
    claims, runs started and finished, retries, the rows its reaper handed back and
    those its pruner deleted.

    Fed by the signals the node sends (``run_started``, ``run_finished``,
    ``rows_reaped``, ``rows_pruned``: the node does not know of metrics); :meth:`connect` and
    :meth:`disconnect` wire and unwire them."""

    def __init__(self, node_id: str, registry: CollectorRegistry) -> None:
        require_prometheus()
        from prometheus_client import Counter, Gauge, Histogram  # noqa: PLC0415

        self.node_id = node_id
        self._uid = f"django_htask.metrics:{node_id}:{id(self)}"
        labels = ("name", "function")
        info = Gauge(
            "django_htask_node_info",
            "1, labelled with this process' node id and django-htask version.",
            ("node", "version"),
            registry=registry,
        )
        from django_htask._version import __version__  # noqa: PLC0415

        info.labels(node_id, __version__).set(1)
        self.claims = Counter(
            "django_htask_node_claims",
            "Runs this node claimed and started: a one-off task (kind=task) or a "
            "schedule's occurrence (kind=schedule).",
            ("kind",),
            registry=registry,
        )
        self.started = Counter(
            "django_htask_node_runs_started",
            "Runs this node started, by schedule (or function) name and function.",
            labels,
            registry=registry,
        )
        self.finished = Counter(
            "django_htask_node_runs_finished",
            "Runs this node finished, by name, function and status (succeeded, failed, snoozed).",
            (*labels, "status"),
            registry=registry,
        )
        self.retries = Counter(
            "django_htask_node_retries",
            "Runs this node started that were a retry (attempt > 1).",
            labels,
            registry=registry,
        )
        self.reaped = Counter(
            "django_htask_node_reaped",
            "Rows (nodes, tasks, runs) held by dead nodes that this node's reaper handed back.",
            registry=registry,
        )
        self.pruned = Counter(
            "django_htask_node_pruned",
            "Rows past their retention this node's pruner deleted, by table: finished "
            "tasks, runs, and rows of nodes stopped long ago.",
            ("table",),
            registry=registry,
        )
        self.duration = Histogram(
            "django_htask_node_run_duration_seconds",
            "How long the runs this node finished took, by name.",
            ("name",),
            buckets=DURATION_BUCKETS,
            registry=registry,
        )

    def connect(self) -> None:
        run_started.connect(self._on_started, weak=False, dispatch_uid=self._uid)
        run_finished.connect(self._on_finished, weak=False, dispatch_uid=self._uid)
        rows_reaped.connect(self._on_reaped, weak=False, dispatch_uid=self._uid)
        rows_pruned.connect(self._on_pruned, weak=False, dispatch_uid=self._uid)

    def disconnect(self) -> None:
        run_started.disconnect(dispatch_uid=self._uid)
        run_finished.disconnect(dispatch_uid=self._uid)
        rows_reaped.disconnect(dispatch_uid=self._uid)
        rows_pruned.disconnect(dispatch_uid=self._uid)

    def _on_started(
        self,
        sender: Any,
        *,
        node: str,
        name: str,
        function: str,
        attempt: int,
        task_id: int | None = None,
        **kwargs: Any,
    ) -> None:
        if node != self.node_id:
            return
        self.claims.labels("task" if task_id is not None else "schedule").inc()
        self.started.labels(name, function).inc()
        if attempt > 1:
            self.retries.labels(name, function).inc()

    def _on_reaped(self, sender: Any, *, node: str, rows: int, **kwargs: Any) -> None:
        if node == self.node_id:
            self.reaped.inc(rows)

    def _on_pruned(
        self, sender: Any, *, node: str, tasks: int, runs: int, nodes: int, **kwargs: Any
    ) -> None:
        if node == self.node_id:
            for table, rows in (("task", tasks), ("run", runs), ("node", nodes)):
                self.pruned.labels(table).inc(rows)

    def _on_finished(
        self,
        sender: Any,
        *,
        node: str,
        name: str,
        function: str,
        status: str,
        duration: float,
        **kwargs: Any,
    ) -> None:
        if node != self.node_id:
            return
        self.finished.labels(name, function, str(status)).inc()
        self.duration.labels(name).observe(max(0.0, duration))
