"""A node serving some queues, a django.tasks alias, a number of tasks, or a batch
(``runscheduler --queue / --exclude-queue / --backend / --max-tasks / --batch``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from django_htask import schedule
from django_htask.engine import FakeClock
from django_htask.models import Node, Schedule, Task, TaskStatus
from django_htask.queues import QueueFilter
from tests.integration.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)

ADD = "tests.integration.testapp.tasks:add"
MakeNode = Callable[..., Any]


def statuses() -> dict[str, str]:
    return dict(Task.objects.values_list("queue_name", "status"))


def make_schedule(name: str, queue: str) -> Schedule:
    row = Schedule(name=name, function=ADD, schedule="@every 1m", queue_name=queue)
    row.set_call((10 if queue == "default" else 20,))
    row.save()
    return row


def test_a_node_serves_only_its_queues_tasks_and_schedules(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    for queue in ("default", "emails", "reports"):
        schedule(tasks.add, 1, queue_name=queue)
    make_schedule("d", "default")
    mails = make_schedule("m", "emails")
    node = make_node(queues=QueueFilter.of(["emails"]))
    fake_clock.advance(60)
    assert statuses() == {"default": "pending", "emails": "succeeded", "reports": "pending"}
    assert set(node.placed_schedules()) == {mails.pk}
    assert calls["add"] == [1, 20]
    assert Node.objects.get(id=node.node_id).queues == "emails"


def test_every_queue_but_the_excluded_ones(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    for queue in ("default", "emails", "slow"):
        schedule(tasks.add, 1, queue_name=queue)
    node = make_node(queues=QueueFilter.of([], ["slow"]))
    fake_clock.advance(0)
    assert statuses() == {"default": "succeeded", "emails": "succeeded", "slow": "pending"}
    assert Node.objects.get(id=node.node_id).queues == "*,-slow"


def test_a_node_for_one_backend_runs_only_its_tasks_and_no_schedule(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    own = schedule(tasks.add, 1)
    theirs = schedule(tasks.add, 2)
    Task.objects.filter(pk=theirs.pk).update(backend="other")
    make_schedule("d", "default")
    node = make_node(backend="other")
    fake_clock.advance(60)
    assert Task.objects.get(pk=theirs.pk).status == TaskStatus.SUCCEEDED
    assert Task.objects.get(pk=own.pk).status == TaskStatus.PENDING
    assert node.placed_schedules() == {}
    assert calls["add"] == [2]
    assert Node.objects.get(id=node.node_id).queues == ""  # shares out no schedule


def test_max_tasks_runs_that_many_and_claims_no_more(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    for n in range(5):
        schedule(tasks.add, n)
    node = make_node(workers=4, max_tasks=2)
    fake_clock.advance(1)
    assert Task.objects.filter(status=TaskStatus.SUCCEEDED).count() == 2
    assert Task.objects.filter(status=TaskStatus.PENDING, attempts=0).count() == 3
    assert node.stop_requested
    assert node.done == "ran the maximum of 2 tasks (--max-tasks)"


def test_max_tasks_must_be_positive() -> None:
    from django_htask.node import Node as Node_

    with pytest.raises(ValueError, match="max_tasks must be greater than zero, got 0"):
        Node_(max_tasks=0)


def test_batch_stops_once_nothing_is_due(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    for n in range(3):
        schedule(tasks.add, n)
    later = schedule(tasks.add, 9, delay=3600)
    node = make_node(batch=True)
    fake_clock.advance(1)
    assert sorted(calls["add"]) == [0, 1, 2]
    assert node.stop_requested and node.done == "nothing is due any more (--batch)"
    assert Task.objects.get(pk=later.pk).status == TaskStatus.PENDING


def test_batch_fires_the_schedules_due_then_stops(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    row = make_schedule("d", "default")
    Schedule.objects.filter(pk=row.pk).update(next_run_at=fake_clock.now())
    node = make_node(batch=True)
    fake_clock.advance(1)
    assert calls["add"] == [10]
    assert node.stop_requested
