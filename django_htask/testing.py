"""For tests: a node with no database.

:class:`InMemoryStore` implements the whole store interface in memory, so a
:class:`~django_htask.node.Node` runs on it as on a database — firing schedules,
claiming tasks, retrying, reaping — driven by the engine's
:class:`~django_htask.engine.FakeClock`, with no database and no sleep::

    from django_htask.engine import FakeClock
    from django_htask.node import Node
    from django_htask.testing import InMemoryStore

    clock = FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
    store = InMemoryStore(clock)
    report = store.add_schedule("report", "myapp.tasks:report", "@every 1h")
    node = Node(store=store, clock=clock, node_id="test")
    node.start()
    clock.advance(3600)                   # the report ran once
    assert store.runs_of(schedule_id=report)[0].status == "succeeded"
    node.stop()

The functions must be registered (``@task``); Django's settings must be configured
(the node reads ``HTASK``), not a database.
"""

from __future__ import annotations

from .store.memory import InMemoryStore, NodeRecord, ScheduleRecord, TaskRecord

__all__ = ["InMemoryStore", "NodeRecord", "ScheduleRecord", "TaskRecord"]
