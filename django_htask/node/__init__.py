"""The ``runscheduler`` process: the engine, fed from the database.

A :class:`Node` runs three engine schedulers on one clock:

``control``
    one thread that makes every decision against the database, in order: timers for
    each schedule's ``next_run_at`` and for the next one-off task due, the poll that
    reads what other processes changed, task claims and the writing of results
    (:mod:`~django_htask.node.control`, which also retries the start-up steps while
    the database is away).
``jobs``
    the worker pool that calls the registered functions
    (:mod:`~django_htask.node.execution`).
``heartbeat``
    the node's heartbeat, lease renewal and reaping, on a thread of its own
    (:mod:`~django_htask.node.liveness`).

The parts, one job each:

- :mod:`~django_htask.node.node` — the life of a node: start, poll, wake-up, stop;
- :mod:`~django_htask.node.firing` — the schedules placed and fired (claimed, run,
  retried), on an engine ``Timetable``;
- :mod:`~django_htask.node.planning` — what a due schedule does (misfire and overlap
  policies, broken rows), decided without writing;
- :mod:`~django_htask.node.tasks` — claiming and running one-off tasks;
- :mod:`~django_htask.node.execution` — running one call (signals, timing, errors);
- :mod:`~django_htask.node.running` — what the workers are doing;
- :mod:`~django_htask.node.liveness` — heartbeats, reaping, pruning;
- :mod:`~django_htask.node.membership` — several nodes: roles and notifications;
- :mod:`~django_htask.node.shutdown` — stopping: the threads closed, the last results
  written, what is left handed back;
- :mod:`~django_htask.node.context` — what the parts share.

A node talks to the database only through its :class:`~django_htask.store.Store`, and
hears of changes made in its own process through :mod:`django_htask.notices`; nothing
below imports it.
"""

from __future__ import annotations

from django_htask.exceptions import StartAborted

from .node import EXIT_STUCK, Node, NodeStats, new_node_id
from .shutdown import EXIT_GRACE

__all__ = ["EXIT_GRACE", "EXIT_STUCK", "Node", "NodeStats", "StartAborted", "new_node_id"]
