"""The django.tasks backend on a node (Django >= 6.0; the tox runs on 6.0 and 6.1 cover it).

On Django 5.2 this module is skipped: there is no ``django.tasks`` to test against.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
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

from django_htask import backends, cancel, notices
from django_htask.apps import uses_htask_backend
from django_htask.backends import RUNNER, HtaskBackend, RunInterrupted, UnknownDjangoTask
from django_htask.engine import FakeClock, registry
from django_htask.models import Run, RunStatus, Task, TaskStatus, new_token
from django_htask.operations import prune_now
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
    assert result.worker_ids == [node.node_id]  # from the task's row: no run row
    assert not Run.objects.filter(task__token=result.id).exists()
    assert result.started_at == result.last_attempted_at == fake_clock.now()
    assert result.finished_at == fake_clock.now()
    assert result.return_value == 42
    # read back from the database, as another process would
    assert default_task_backend.get_result(result.id).return_value == 42


def test_a_task_failing_twice_then_succeeding_has_three_attempts_and_two_errors(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its success wrote no run row: the result's last attempt and worker come from the
    task's row, the two failures from their runs."""
    monkeypatch.setattr(task_backends["default"], "max_attempts", 3)
    node = make_node()
    result = django_tasks.fails_twice.enqueue("a")
    for seconds in (0, 1, 2):  # RETRY_BACKOFF 1 s, doubled
        fake_clock.advance(seconds)
    assert calls["fails_twice"] == ["a"] * 3
    got = default_task_backend.get_result(result.id)
    assert (got.status, got.return_value) == (TaskResultStatus.SUCCESSFUL, "a")
    assert got.worker_ids == [node.node_id] * 3
    assert [e.exception_class_path for e in got.errors] == ["builtins.ConnectionError"] * 2
    assert got.last_attempted_at == fake_clock.now() and got.attempts == 3
    row = Task.objects.get(token=result.id)
    assert list(Run.objects.filter(task=row).values_list("status", flat=True)) == ["failed"] * 2


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


def test_a_run_after_more_than_100_years_ahead_is_refused(fake_clock: FakeClock) -> None:
    too_late = fake_clock.now() + timedelta(days=36526)
    with pytest.raises(InvalidTask, match="run_after: at must be at most 100 years"):
        django_tasks.double.using(run_after=too_late).enqueue(1)
    assert not Task.objects.exists()


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


def run_on_a_node(make_node: MakeNode, fake_clock: FakeClock, task: Any, *args: Any) -> Any:
    """Enqueue ``task(*args)``, let a node run it, and read its result back."""
    make_node()
    result = task.enqueue(*args)
    fake_clock.advance(0)
    return task.get_result(result.id)


def test_a_failing_task_maps_to_failed_with_the_error(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    got = run_on_a_node(make_node, fake_clock, django_tasks.fails, "nope")
    assert got.status == TaskResultStatus.FAILED
    [error] = got.errors
    assert error.exception_class is ValueError
    assert "ValueError: nope" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        got.return_value  # noqa: B018


def test_a_snoozing_task_is_ready_meanwhile_and_its_snooze_is_no_error(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    finished: list[str] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        finished.append(task_result.status)

    task_finished.connect(receiver)
    try:
        node = make_node()
        result = django_tasks.snoozes_once.enqueue("a")
        fake_clock.advance(0)
        waiting = django_tasks.snoozes_once.get_result(result.id)
        assert (waiting.status, waiting.errors, finished) == (TaskResultStatus.READY, [], [])
        fake_clock.advance(5)
    finally:
        task_finished.disconnect(receiver)
    done = django_tasks.snoozes_once.get_result(result.id)
    assert (done.status, done.return_value, done.errors) == (TaskResultStatus.SUCCESSFUL, "a", [])
    assert finished == ["SUCCESSFUL"]
    assert done.worker_ids == [node.node_id] * 2  # the snoozed attempt ran there too
    row = Task.objects.get(token=result.id)
    assert list(Run.objects.filter(task=row).values_list("status", flat=True)) == ["snoozed"]
    assert (row.attempts, row.snoozes) == (1, 1)


def test_a_task_snoozing_past_its_bound_fails_naming_too_many_snoozes(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any, settings: Any
) -> None:
    from django_htask.exceptions import TooManySnoozes

    settings.HTASK = {**settings.HTASK, "MAX_SNOOZES": 0}
    got = run_on_a_node(make_node, fake_clock, django_tasks.snoozes_once, "b")
    assert got.status == TaskResultStatus.FAILED
    [error] = got.errors
    assert error.exception_class is TooManySnoozes


def test_a_cancelled_task_is_failed_and_unknown_ids_raise(fake_clock: FakeClock) -> None:
    result = django_tasks.double.enqueue(3)
    assert cancel(result.id)
    got = django_tasks.double.get_result(result.id)
    assert got.status == TaskResultStatus.FAILED
    assert got.errors[0].exception_class_path == "django_htask.exceptions.TaskCancelled"
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("no-such-id")


def test_a_result_past_its_retention_says_it_is_gone_and_how_long_tasks_are_kept(
    fake_clock: FakeClock, settings: Any
) -> None:
    """docs/operating.md, "A token past its retention": the backend's error is Django's,
    with the message of get_result's TaskNotFound."""
    settings.HTASK = {"TASK_RETENTION_DAYS": 3}
    result = django_tasks.double.enqueue(3)
    Task.objects.filter(token=result.id).update(
        status=TaskStatus.SUCCEEDED, finished_at=fake_clock.now() - timedelta(days=4)
    )
    assert default_task_backend.get_result(result.id).status == TaskResultStatus.SUCCESSFUL
    prune_now()
    with pytest.raises(TaskResultDoesNotExist) as caught:
        default_task_backend.get_result(result.id)
    message = str(caught.value)
    assert repr(result.id) in message
    assert "kept 3 days" in message and "TASK_RETENTION_DAYS" in message


def test_the_backend_check_needs_the_app_installed() -> None:
    backend = HtaskBackend("default", {})
    assert list(backend.check()) == []
    with override_settings(INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth"]):
        found = [m.id for m in backend.check()]
    assert found == ["django_htask.E005"]


def test_a_bad_option_is_a_check_error() -> None:
    backend = HtaskBackend("default", {"OPTIONS": {"MAX_ATTEMPTS": 0}})
    assert [m.id for m in backend.check()] == ["django_htask.E006"]
    found = checks.run_checks()  # W011 on the suite's SQLite: silenced by its settings
    shown = [m for m in found if m.id and m.id.startswith("django_htask.")]
    assert not [m for m in shown if not m.is_silenced()]


@pytest.mark.parametrize(
    ("kind", "exception"), [("system", SystemExit), ("keyboard", KeyboardInterrupt)]
)
def test_a_task_raising_system_exit_or_keyboard_interrupt_ends_failed(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any, kind: str, exception: type
) -> None:
    finished: list[Any] = []

    def on_finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
        finished.append(task_result)

    task_finished.connect(on_finished)
    try:
        node = make_node()
        result = django_tasks.exits.enqueue(kind)
        fake_clock.advance(0)
    finally:
        task_finished.disconnect(on_finished)
    assert calls["exits"] == [kind]
    [sent] = finished
    assert (sent.id, sent.status) == (result.id, TaskResultStatus.FAILED)
    assert sent.errors[0].exception_class is exception
    got = django_tasks.exits.get_result(result.id)
    assert got.status == TaskResultStatus.FAILED
    [error] = got.errors
    assert error.exception_class is exception
    message = "2" if kind == "system" else "stop"
    assert error.traceback.rstrip().endswith(f"{exception.__name__}: {message}")
    assert not node.stop_requested


def test_the_error_class_is_read_from_the_last_exception_whatever_its_message(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    message = "first line\nsecond line"
    [error] = run_on_a_node(make_node, fake_clock, django_tasks.fails_verbosely, message).errors
    assert error.exception_class is django_tasks.ReportError
    assert "KeyError: 'the cause'" in error.traceback
    assert error.traceback.rstrip().endswith("ValueError: a note that reads like an error")


def test_an_attempt_the_node_ended_reads_as_run_interrupted() -> None:
    row = Task.objects.create(
        function=RUNNER,
        payload=registry.check_call(
            RUNNER, ["tests.integration.testapp.django_tasks.double", [1], {}], {"result_id": "x"}
        ),
        run_at="2030-01-01T00:00Z",
        token="interrupted-task",
        status=TaskStatus.FAILED,
    )
    reason = "interrupted: the node stopped (SHUTDOWN_TIMEOUT 1s) before the run finished"
    Run.objects.create(
        task=row,
        name="x",
        function=RUNNER,
        started_at="2030-01-01T00:00Z",
        status=RunStatus.FAILED,
        error=reason,
    )
    [error] = default_task_backend.get_result("interrupted-task").errors
    assert error.exception_class is RunInterrupted
    assert error.traceback == f"{reason}\n"


@pytest.fixture
def forget() -> Iterator[Callable[[str], None]]:
    """Make this process forget a module and the Django tasks it defines (before the
    test and after it), as if it had never imported it."""
    names: list[str] = []

    def drop(name: str) -> None:
        sys.modules.pop(name, None)
        for path in [p for p in backends._known if p.startswith(f"{name}.")]:
            del backends._known[path]

    def forget_module(name: str) -> None:
        names.append(name)
        drop(name)

    yield forget_module
    for name in names:
        drop(name)


def stored_call(module_path: str, *args: Any) -> str:
    """Store a call of the runner naming ``module_path`` as a web process would (no
    Django task object needed: what a node finds in the table); its token."""
    token = new_token()
    payload = registry.check_call(RUNNER, [module_path, list(args), {}], {"result_id": token})
    Task.objects.create(token=token, function=RUNNER, payload=payload, run_at=backends.clock.now())
    notices.notify_local_change()
    return token


def run_error(token: str) -> str:
    [run] = Run.objects.filter(task__token=token)
    assert run.status == RunStatus.FAILED
    return run.error


def test_a_task_in_a_module_of_an_installed_app_is_imported_to_run(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any, forget: Callable[[str], None]
) -> None:
    module = "tests.integration.testapp.django_late"
    forget(module)
    make_node()
    token = stored_call(f"{module}.late", 41)
    fake_clock.advance(0)
    assert calls["late"] == [41]
    assert module in sys.modules
    result = default_task_backend.get_result(token)
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)
    assert result.task.module_path == f"{module}.late"


@pytest.mark.parametrize(
    ("module_path", "message"),
    [
        (
            "os.system",
            "its module 'os' is in no installed app: move the task into an installed app, "
            "or add 'os' to HTASK['DJANGO_TASK_MODULES']",
        ),
        (
            "tests.integration.testapp.tasks.add",
            "'tests.integration.testapp.tasks.add' is not a Django task: "
            "tests.integration.testapp.tasks.add is <function add",
        ),
        (
            "tests.integration.testapp.no_such_module.job",
            "cannot import 'tests.integration.testapp.no_such_module'",
        ),
        (
            "tests.integration.testapp.django_tasks.ReportError",
            "is not a Django task: tests.integration.testapp.django_tasks.ReportError is <class",
        ),
    ],
)
def test_a_stored_path_that_is_no_allowed_django_task_fails_saying_why(
    make_node: MakeNode, fake_clock: FakeClock, module_path: str, message: str
) -> None:
    make_node()
    token = stored_call(module_path, "echo owned")
    fake_clock.advance(0)
    error = run_error(token)
    assert error.startswith("UnknownDjangoTask: "), error
    assert message in error
    assert Task.objects.get(token=token).status == TaskStatus.FAILED
    with pytest.raises(UnknownDjangoTask) as read:  # the web process cannot read it either
        default_task_backend.get_result(token)
    assert message in str(read.value)


def test_django_task_modules_lets_a_node_import_a_module_outside_the_apps(
    make_node: MakeNode, fake_clock: FakeClock, forget: Callable[[str], None]
) -> None:
    module = "tests.acceptance.extra_jobs"
    forget(module)
    make_node()
    refused = stored_call(f"{module}.shout", "hi")
    fake_clock.advance(0)
    assert f"add {module!r} to HTASK['DJANGO_TASK_MODULES']" in run_error(refused)
    assert module not in sys.modules
    with override_settings(HTASK={"DJANGO_TASK_MODULES": ["tests.acceptance"]}):  # a package
        listed = stored_call(f"{module}.shout", "hi")
        fake_clock.advance(0)
        result = default_task_backend.get_result(listed)
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, "HI")


class SubclassedBackend(HtaskBackend):
    """A site's own subclass of the backend (for uses_htask_backend)."""


IMMEDIATE = {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}


@pytest.mark.parametrize(
    ("tasks", "uses"),
    [
        ({"default": {"BACKEND": "django_htask.backends.HtaskBackend"}}, True),
        ({"default": IMMEDIATE, "mine": {"BACKEND": f"{__name__}.SubclassedBackend"}}, True),
        ({"default": IMMEDIATE}, False),
        ({"default": IMMEDIATE, "broken": {"BACKEND": "does.not.exist"}}, False),
    ],
)
def test_the_app_registers_the_runner_when_tasks_uses_the_backend(
    tasks: dict[str, Any], uses: bool
) -> None:
    with override_settings(TASKS=tasks):
        assert uses_htask_backend() is uses
    assert RUNNER in registry  # tests.settings uses the backend: imported by ready()


def test_in_eager_mode_an_enqueued_task_runs_at_once(
    htask_eager: None, fake_clock: FakeClock
) -> None:
    result = django_tasks.double.enqueue(21)
    again = django_tasks.double.get_result(result.id)
    assert (again.status, again.return_value) == (TaskResultStatus.SUCCESSFUL, 42)
