"""The django.tasks backend on a node (Django >= 6.0; the tox runs on 6.0 and 6.1 cover it).

On Django 5.2 this module is skipped: there is no ``django.tasks`` to test against.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip(
    "django.tasks",
    reason="django.tasks needs Django >= 6.0; `make compat` runs these on Django 6.0/6.1",
)

from django.core import checks
from django.tasks import TaskResultStatus, default_task_backend, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.test import override_settings

from django_htask import cancel
from django_htask.backends import RUNNER, HtaskBackend
from django_htask.engine import FakeClock
from django_htask.models import Task, TaskStatus
from tests.integration.testapp import django_tasks

pytestmark = pytest.mark.django_db(transaction=True)
MakeNode = Callable[..., Any]


def test_the_backend_declares_what_it_supports() -> None:
    backend = task_backends["default"]
    assert isinstance(backend, HtaskBackend)
    assert backend.supports_defer and backend.supports_get_result
    assert backend.supports_priority and backend.supports_async_task


def test_enqueue_stores_a_pending_task_and_sends_task_enqueued(fake_clock: FakeClock) -> None:
    seen: list[Any] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        seen.append(task_result)

    task_enqueued.connect(receiver)
    try:
        result = django_tasks.double.enqueue(21)
    finally:
        task_enqueued.disconnect(receiver)
    assert [r.id for r in seen] == [result.id]
    assert result.status == TaskResultStatus.READY
    row = Task.objects.get(token=result.id)
    assert (row.function, row.status, row.run_at) == (RUNNER, TaskStatus.PENDING, fake_clock.now())
    again = django_tasks.double.get_result(result.id)
    assert (again.status, again.args, again.kwargs) == (TaskResultStatus.READY, [21], {})


def test_an_enqueued_task_runs_on_the_node_with_signals(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    events: list[tuple[str, str]] = []

    def started(sender: Any, task_result: Any, **kwargs: Any) -> None:
        events.append(("started", task_result.status))

    def finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
        events.append(("finished", task_result.status))

    task_started.connect(started)
    task_finished.connect(finished)
    try:
        node = make_node()
        result = django_tasks.double.enqueue(21)
        fake_clock.advance(0)
    finally:
        task_started.disconnect(started)
        task_finished.disconnect(finished)
    assert calls["double"] == [21]
    assert events == [("started", "RUNNING"), ("finished", "SUCCESSFUL")]
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.is_finished
    assert result.worker_ids == [node.node_id]
    assert result.started_at == result.last_attempted_at == fake_clock.now()
    assert result.finished_at == fake_clock.now()
    assert result.return_value == 42
    # read back from the database, as another process would
    assert default_task_backend.get_result(result.id).return_value == 42


def test_run_after_defers_the_task(make_node: MakeNode, fake_clock: FakeClock, calls: Any) -> None:
    make_node()
    later = fake_clock.now() + timedelta(seconds=30)
    result = django_tasks.double.using(run_after=later).enqueue(1)
    fake_clock.advance(29)
    assert calls["double"] == []
    waiting = django_tasks.double.get_result(result.id)
    assert waiting.status == TaskResultStatus.READY
    with pytest.raises(ValueError, match="not finished"):
        waiting.return_value  # noqa: B018
    fake_clock.advance(1)
    assert calls["double"] == [1]
    got = django_tasks.double.get_result(result.id)
    assert got.status == TaskResultStatus.SUCCESSFUL
    assert got.task.run_after == later
    assert got.return_value == 2


def test_priority_context_and_async_tasks(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    make_node()
    result = django_tasks.with_context.enqueue("hi")
    async_result = django_tasks.async_double.enqueue(4)
    fake_clock.advance(0)
    assert calls["with_context"] == [("hi", 1, result.id)]
    assert calls["async_double"] == [4]
    got = django_tasks.with_context.get_result(result.id)
    assert (got.task.priority, got.task.takes_context) == (10, True)
    assert got.status == TaskResultStatus.SUCCESSFUL
    assert got.return_value == "hi"
    async_got = default_task_backend.get_result(async_result.id)
    assert (async_got.status, async_got.return_value) == ("SUCCESSFUL", 8)
    with pytest.raises(InvalidTask, match="priority"):
        django_tasks.double.using(priority=101)


def test_higher_priority_tasks_due_together_start_first(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    later = fake_clock.now() + timedelta(seconds=5)
    for value, priority in ((1, -10), (2, 50), (3, 0)):
        django_tasks.double.using(run_after=later, priority=priority).enqueue(value)
    make_node(workers=1)
    fake_clock.advance(5)
    assert calls["double"] == [2, 3, 1]


def test_a_failing_task_maps_to_failed_with_the_error(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    make_node()
    result = django_tasks.fails.enqueue("nope")
    fake_clock.advance(0)
    got = django_tasks.fails.get_result(result.id)
    assert got.status == TaskResultStatus.FAILED
    [error] = got.errors
    assert error.exception_class is ValueError
    assert "ValueError: nope" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        got.return_value  # noqa: B018


def test_a_cancelled_task_is_failed_and_unknown_ids_raise(fake_clock: FakeClock) -> None:
    result = django_tasks.double.enqueue(3)
    assert cancel(result.id)
    got = django_tasks.double.get_result(result.id)
    assert got.status == TaskResultStatus.FAILED
    assert got.errors[0].exception_class_path == "django_htask.backends.TaskCancelled"
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("no-such-id")


def test_the_backend_check_needs_the_app_installed() -> None:
    backend = HtaskBackend("default", {})
    assert list(backend.check()) == []
    with override_settings(INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth"]):
        found = [m.id for m in backend.check()]
    assert found == ["django_htask.E005"]


def test_a_bad_option_is_a_check_error() -> None:
    backend = HtaskBackend("default", {"OPTIONS": {"MAX_ATTEMPTS": 0}})
    assert [m.id for m in backend.check()] == ["django_htask.E006"]
    found = checks.run_checks()
    assert not [m for m in found if m.id and m.id.startswith("django_htask.")]
