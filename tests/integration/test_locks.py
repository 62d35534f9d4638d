"""Locks and limits on SQLite: what ``schedule()``, ``schedule_many()`` and ``@task``
store and refuse, a real node honouring them (on the fake clock), and what the
overview and ``htask status`` show waiting."""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command

from django_htask import schedule, schedule_many, task
from django_htask.engine import FakeClock
from django_htask.models import Task, TaskStatus
from django_htask.overview import Waiting, waiting_on_gates
from tests.integration.test_node import wait_for
from tests.integration.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)

MakeNode = Callable[..., Any]


@pytest.fixture
def exclusive() -> Iterator[dict[str, int]]:
    tasks.running.update(now=0, most=0)
    tasks.gate.clear()
    yield tasks.running
    tasks.gate.set()


# -- what is stored, and refused ---------------------------------------------------------
def test_a_call_s_lock_and_limit_are_stored_and_override_the_function_s() -> None:
    declared = schedule(tasks.serial, "a")
    assert (declared.lock, declared.max_running) == ("testapp:serial", 3)
    own = schedule(tasks.serial, "b", lock="account:7", max_running=1)
    assert (own.lock, own.max_running) == ("account:7", 1)
    plain = schedule(tasks.add, 1)
    assert (plain.lock, plain.max_running) == (None, None)
    rows = Task.objects.order_by("id").values_list("lock", "max_running")
    assert list(rows) == [("testapp:serial", 3), ("account:7", 1), (None, None)]


def test_schedule_many_takes_a_lock_per_call_and_a_limit_for_all() -> None:
    made = schedule_many(
        [
            (tasks.add, (1,), {}),
            (tasks.add, (2,), {}, None, "account:7"),
            (tasks.add, (3,), {}, "k", "account:8"),
            (tasks.serial, ("x",), {}, None, None),
        ],
        max_running=4,
    )
    assert [(t.lock, t.max_running, t.key) for t in made] == [
        (None, 4, None),
        ("account:7", 4, None),
        ("account:8", 4, "k"),
        ("testapp:serial", 4, None),
    ]
    stored = Task.objects.order_by("id").values_list("lock", "max_running", "key")
    assert list(stored) == [(t.lock, t.max_running, t.key) for t in made]


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"lock": ""}, ValueError, "lock must be a non-empty string, got ''"),
        ({"lock": "x" * 201}, ValueError, "lock must be at most 200 characters, got 201"),
        ({"lock": 7}, TypeError, "lock must be a str, got 7"),
        ({"max_running": 0}, ValueError, "max_running must be from 1 to 100000, got 0"),
        ({"max_running": True}, ValueError, "max_running must be an int >= 1, got True"),
        ({"max_running": 2.5}, ValueError, "max_running must be an int >= 1, got 2.5"),
    ],
)
def test_a_bad_lock_or_limit_is_refused_naming_it(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        schedule(tasks.add, 1, **options)
    with pytest.raises(error, match=re.escape(message)):
        task(**options)(tasks.add)
    assert not Task.objects.exists()


def test_a_bad_lock_in_schedule_many_names_its_call() -> None:
    with pytest.raises(ValueError, match=r"calls\[1\]: lock must be a non-empty string"):
        schedule_many([(tasks.add, (1,), {}), (tasks.add, (2,), {}, None, "")])
    with pytest.raises(TypeError, match=r"calls\[0\] must be a tuple"):
        schedule_many([(tasks.add, (1,), {}, None, None, None)])  # type: ignore[list-item]
    assert not Task.objects.exists()


# -- a node ------------------------------------------------------------------------------
def test_a_node_runs_the_tasks_of_a_lock_one_at_a_time_in_due_order(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any, exclusive: dict[str, int]
) -> None:
    now = fake_clock.now()
    for n in range(4):
        schedule(tasks.exclusive, f"e{n}", lock="l", at=now - timedelta(seconds=10 - n))
    schedule(tasks.add, 1)
    node = make_node(workers=4, start=False)
    node.start()
    fake_clock.advance(0, wait=False)
    wait_for(lambda: len(calls["exclusive"]) == 1 and calls["add"] == [1])
    for _ in range(3):  # polls while the lock is held: nothing else of it starts
        fake_clock.advance(node.poll_interval, wait=False)
    assert calls["exclusive"] == ["e0"]
    tasks.gate.set()  # no clock needed from here: each end starts the next
    wait_for(lambda: len(calls["exclusive"]) == 4)
    assert calls["exclusive"] == ["e0", "e1", "e2", "e3"]
    assert exclusive["most"] == 1
    wait_for(lambda: not Task.objects.exclude(status=TaskStatus.SUCCEEDED).exists())


def test_a_node_runs_at_most_max_running_tasks_of_a_function(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any, exclusive: dict[str, int]
) -> None:
    for n in range(5):
        schedule(tasks.exclusive, f"m{n}", max_running=2)
    node = make_node(workers=5, start=False)
    node.start()
    fake_clock.advance(0, wait=False)
    wait_for(lambda: len(calls["exclusive"]) == 2)
    for _ in range(3):
        fake_clock.advance(node.poll_interval, wait=False)
    assert len(calls["exclusive"]) == 2
    tasks.gate.set()
    wait_for(lambda: len(calls["exclusive"]) == 5)
    assert exclusive["most"] == 2
    wait_for(lambda: not Task.objects.exclude(status=TaskStatus.SUCCEEDED).exists())


# -- what waits --------------------------------------------------------------------------
def test_the_overview_and_htask_status_show_what_waits_on_locks_and_limits(
    fake_clock: FakeClock,
) -> None:
    now = fake_clock.now()
    for n in range(3):
        schedule(tasks.add, n, lock="account:7")
    schedule(tasks.add, 9, lock="account:8")
    schedule(tasks.add, 9, lock="account:9", delay=60)  # not due: not waiting
    schedule_many([(tasks.serial, (str(n),), {}) for n in range(2)])
    assert waiting_on_gates(now) == [
        Waiting("lock", "account:7", 3),
        Waiting("lock", "testapp:serial", 2),
        Waiting("lock", "account:8", 1),
        Waiting("limit", "tests.integration.testapp.tasks:serial", 2),
    ]
    assert waiting_on_gates(now, shown=1) == [
        Waiting("lock", "account:7", 3),
        Waiting("limit", "tests.integration.testapp.tasks:serial", 2),
    ]
    out = io.StringIO()
    call_command("htask", "status", stdout=out)
    text = out.getvalue()
    assert "waiting on locks: account:7 3, testapp:serial 2, account:8 1" in text
    assert "waiting on max_running: tests.integration.testapp.tasks:serial 2" in text
