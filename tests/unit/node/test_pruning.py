"""A node deletes by itself what is past its retention (node/pruning.py), on the
in-memory store and the fake clock: after its start, then every few minutes, in
batches with pauses, one node at a time, through an outage."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from django_htask.conf import HtaskSettings
from django_htask.engine import FakeClock
from django_htask.enums import RunStatus, TaskStatus
from django_htask.node import Node, pruning
from django_htask.retention import TaskRetention
from django_htask.signals import rows_pruned
from django_htask.store import RunOutcome
from django_htask.testing import InMemoryStore

from .conftest import ADD

MakeNode = Callable[..., Node]
INTERVAL = HtaskSettings().prune_interval
_ids = itertools.count(10_000)


def ended(store: InMemoryStore, clock: FakeClock, days_ago: float, **fields: Any) -> int:
    """A task that succeeded ``days_ago`` days ago, with its run."""
    at = clock.now() - timedelta(days=days_ago)
    tid = store.add_task(ADD, 1, run_at=at)
    task = store.tasks[tid]
    task.status, task.finished_at, task.attempts = TaskStatus.SUCCEEDED, at, 1
    for name, value in fields.items():
        setattr(task, name, value)
    store.runs[next(_ids)] = RunOutcome(
        RunStatus.SUCCEEDED, ADD, ADD, "old", 1, at, at, at, task_id=tid
    )
    return tid


@pytest.fixture
def pruned() -> Iterator[list[dict[str, Any]]]:
    """What the ``rows_pruned`` signal sent."""
    sent: list[dict[str, Any]] = []

    def receive(sender: object, **kwargs: Any) -> None:
        sent.append({k: v for k, v in kwargs.items() if k != "signal"})

    rows_pruned.connect(receive, weak=False, dispatch_uid="test_pruning")
    yield sent
    rows_pruned.disconnect(dispatch_uid="test_pruning")


def test_a_node_prunes_after_its_start_then_every_interval(
    make_node: MakeNode,
    clock: FakeClock,
    store: InMemoryStore,
    pruned: list[dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    old = [ended(store, clock, 8) for _ in range(3)]
    young = ended(store, clock, 7 - 200 / 86400)  # past its 7 days 200 s from now
    node = make_node()
    assert set(store.tasks) == {*old, young}  # its start goes first
    caplog.set_level("INFO", logger="django_htask.node.pruning")
    clock.advance(pruning.FIRST_DELAY)
    assert set(store.tasks) == {young}
    assert len(store.runs) == 1
    me = store.nodes[node.node_id]
    assert (me.pruned_tasks, me.pruned_runs, me.pruned_at) == (3, 3, clock.now())
    assert pruned == [{"node": node.node_id, "tasks": 3, "runs": 3, "nodes": 0}]
    mine = [r for r in caplog.records if r.name == "django_htask.node.pruning"]
    assert [getattr(r, "action", "") for r in mine] == ["pruned"]
    clock.advance(INTERVAL - 60)  # no round yet
    assert young in store.tasks
    clock.advance(60)
    assert young not in store.tasks
    assert store.nodes[node.node_id].pruned_tasks == 4


def test_a_round_goes_in_batches_with_pauses_between(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore
) -> None:
    for _ in range(5):
        ended(store, clock, 8)
    make_node(settings=HtaskSettings(prune_batch=4))  # 4 tasks (and their runs) a batch
    clock.advance(pruning.FIRST_DELAY)
    assert len(store.tasks) == 1  # one batch of 4 tasks, then a pause
    clock.advance(pruning.MIN_PAUSE)
    assert store.tasks == {}


def test_only_the_live_node_with_the_smallest_id_prunes(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore
) -> None:
    for _ in range(3):
        ended(store, clock, 8)
    first, second = make_node(node_id="a-node"), make_node(node_id="b-node")
    clock.advance(pruning.FIRST_DELAY)
    assert store.tasks == {}
    assert store.nodes[first.node_id].pruned_tasks == 3
    assert store.nodes[second.node_id].pruned_tasks == 0
    first.stop(timeout=5)  # the turn goes to the next at its next round
    ended(store, clock, 8)
    clock.advance(INTERVAL)
    assert store.tasks == {}
    assert store.nodes[second.node_id].pruned_tasks == 1


def test_an_outage_ends_the_round_and_the_next_goes_on(
    make_node: MakeNode,
    clock: FakeClock,
    store: InMemoryStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="django_htask.node.pruning")
    tid = ended(store, clock, 8)
    make_node()
    with store.outage("connection refused"):
        clock.advance(pruning.FIRST_DELAY)
    assert tid in store.tasks
    actions = [getattr(r, "action", "") for r in caplog.records]
    assert "prune_put_off" in actions or "prune_failed" in actions
    clock.advance(INTERVAL)
    assert tid not in store.tasks


def test_retention_zero_keeps_everything(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore
) -> None:
    keep = HtaskSettings(task_retention_days=TaskRetention.of(0), run_retention_days=0)
    tid = ended(store, clock, 3650)
    own = ended(store, clock, 1, retention=3600)  # its function's own retention applies
    make_node(settings=keep)
    clock.advance(pruning.FIRST_DELAY)
    assert tid in store.tasks
    assert own not in store.tasks
