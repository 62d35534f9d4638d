"""Django signals sent by django-htask.

``task_scheduled(sender=Task, task=...)``
    after a one-off task is stored and committed (from :func:`django_htask.schedule`).
``run_started(sender=Run, name, function, node, schedule_id, task_id, scheduled_for, attempt)``
    in ``runscheduler``, on the worker thread, just before the function is called.
``run_finished(sender=Run, ..., status, error, duration)``
    in ``runscheduler``, on the worker thread, when the call returned or raised.
``rows_reaped(sender=Node, node, rows)``
    in ``runscheduler``, on the heartbeat thread, when the reaper of node ``node`` (a
    node id) handed back ``rows`` rows held by dead nodes (the nodes declared dead,
    their tasks and schedule runs; more than 0).
``rows_pruned(sender=Node, node, tasks, runs, nodes)``
    in ``runscheduler``, on the pruner's thread, when a round of node ``node``'s pruner
    deleted rows past their retention: ``tasks`` finished tasks, ``runs`` runs (those
    of the tasks among them), ``nodes`` rows of nodes stopped long ago.

Receivers run on the thread that sends; an exception in one is logged, never raised
into the scheduler (``send_robust``).
"""

from __future__ import annotations

from django.dispatch import Signal

__all__ = ["rows_pruned", "rows_reaped", "run_finished", "run_started", "task_scheduled"]

task_scheduled = Signal()
run_started = Signal()
run_finished = Signal()
rows_reaped = Signal()
rows_pruned = Signal()
