"""Sending failed one-off tasks again: ``operations.send_again``, the admin's action and
``manage.py htask retry`` (one function behind both)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.test import Client

from django_htask import schedule
from django_htask.engine import FakeClock
from django_htask.models import Run, RunStatus, Task, TaskStatus
from django_htask.operations import send_again, since_time
from django_htask.store import rules
from tests.integration.testapp import tasks

ADD = "tests.integration.testapp.tasks:add"
URL = "/admin/django_htask/task/"


def failed_task(now: datetime, attempts: int = 2, finished: float = 60.0, **kw: Any) -> Task:
    """A task that failed ``attempts`` times, ``finished`` seconds before ``now``."""
    task = schedule(tasks.add, 1, b=2, max_attempts=attempts, queue_name="mail")
    fields = {
        "status": TaskStatus.FAILED,
        "attempts": attempts,
        "last_error": "RuntimeError: boom",
        "traceback": "Traceback …",
        "finished_at": now - timedelta(seconds=finished),
        "started_at": now - timedelta(seconds=finished + 1),
        "priority": 5,
    }
    Task.objects.filter(pk=task.pk).update(**{**fields, **kw})
    for attempt in range(1, attempts + 1):
        Run.objects.create(
            task=task,
            name=ADD,
            function=ADD,
            attempt=attempt,
            status=RunStatus.FAILED,
            started_at=now - timedelta(seconds=finished + 1),
            error="RuntimeError: boom",
        )
    task.refresh_from_db()
    return task


def other_task(status: str) -> Task:
    task = schedule(tasks.add, 1)
    Task.objects.filter(pk=task.pk).update(status=status)
    return task


# -- the function ------------------------------------------------------------------------
@pytest.mark.django_db
def test_send_again_resets_the_same_row_and_keeps_its_runs(fake_clock: FakeClock) -> None:
    fake_clock.advance(3600)
    now = fake_clock.now()
    task = failed_task(now, abort_requested_at=now)  # it was aborted
    done = other_task(TaskStatus.SUCCEEDED)
    result = send_again([task.pk, done.pk, 999_999])
    assert result.sent == (task.pk,)
    assert result.not_failed == {done.pk: "succeeded"}
    assert result.unknown == (999_999,)
    again = Task.objects.get(pk=task.pk)
    assert (again.status, again.attempts, again.run_at) == (TaskStatus.PENDING, 0, now)
    assert (again.last_error, again.traceback, again.finished_at) == ("", "", None)
    assert again.started_at is None and again.locked_by is None
    assert again.abort_requested_at is None  # its old abort would stop it at once
    # The same call, token, queue, priority and number of attempts allowed.
    assert (again.token, again.function, again.call) == (task.token, ADD, ((1,), {"b": 2}))
    assert (again.queue_name, again.priority, again.max_attempts) == ("mail", 5, 2)
    assert Run.objects.filter(task=task).count() == 2  # the history is kept
    assert Task.objects.get(pk=done.pk).status == TaskStatus.SUCCEEDED


@pytest.mark.django_db(transaction=True)
def test_a_task_sent_again_runs_again_with_a_fresh_attempt_count(
    make_node: Any, fake_clock: FakeClock, calls: Any
) -> None:
    make_node()
    task = schedule(tasks.boom, "bad", max_attempts=2)
    fake_clock.advance(0)
    fake_clock.advance(1)  # RETRY_BACKOFF = 1
    task.refresh_from_db()
    assert (task.status, task.attempts) == (TaskStatus.FAILED, 2)
    assert send_again([task.pk]).sent == (task.pk,)
    fake_clock.advance(0)
    fake_clock.advance(1)
    task.refresh_from_db()
    assert (task.status, task.attempts) == (TaskStatus.FAILED, 2)  # two attempts again
    assert len(calls["boom"]) == 4
    history = list(Run.objects.filter(task=task).order_by("pk").values_list("attempt", "status"))
    assert history == [(1, "failed"), (2, "failed"), (1, "failed"), (2, "failed")]


@pytest.mark.parametrize(
    ("text", "back"),
    [("90s", 90), ("90", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400), ("1W", 604800)],
)
def test_since_time_reads_a_duration_back_from_now(text: str, back: int) -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    assert since_time(text, now) == now - timedelta(seconds=back)


def test_since_time_reads_iso_dates_naive_ones_in_time_zone() -> None:
    assert since_time("2029-12-31T18:00") == datetime(2029, 12, 31, 18, tzinfo=UTC)
    assert since_time("2029-12-31") == datetime(2029, 12, 31, tzinfo=UTC)
    assert since_time("2029-12-31 18:00+01:00") == datetime(2029, 12, 31, 17, tzinfo=UTC)


@pytest.mark.parametrize("text", ["yesterday", "2h ago", "-5m", "2029-13-45", ""])
def test_since_time_names_what_it_cannot_read(text: str) -> None:
    with pytest.raises(ValueError, match="neither a duration"):
        since_time(text)


# -- the admin action ----------------------------------------------------------------------
def _client(*perms: str, superuser: bool = False) -> Client:
    if superuser:
        user = User.objects.create_superuser("root", "root@example.com", "pw")
    else:
        user = User.objects.create_user("staff", "s@example.com", "pw", is_staff=True)
        for codename in perms:
            user.user_permissions.add(Permission.objects.get(codename=codename))
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_the_admin_action_sends_failed_tasks_again(fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    task = failed_task(now)
    running = other_task(TaskStatus.RUNNING)
    client = _client(superuser=True)
    response = client.post(
        URL,
        {"action": "send_tasks_again", "_selected_action": [task.pk, running.pk]},
        follow=True,
    )
    text = response.content.decode()
    assert "1 failed task(s) sent again" in text
    assert "1 task(s) not sent again: they had not failed" in text
    task.refresh_from_db()
    assert (task.status, task.attempts) == (TaskStatus.PENDING, 0)
    assert Run.objects.filter(task=task).count() == 2
    assert Task.objects.get(pk=running.pk).status == TaskStatus.RUNNING


@pytest.mark.django_db
def test_the_admin_action_needs_the_change_permission(fake_clock: FakeClock) -> None:
    task = failed_task(fake_clock.now())
    viewer = _client("view_task")
    page = viewer.get(URL).content.decode()
    assert "send_tasks_again" not in page
    viewer.post(URL, {"action": "send_tasks_again", "_selected_action": [task.pk]})
    assert Task.objects.get(pk=task.pk).status == TaskStatus.FAILED
    editor = Client()
    editor.force_login(User.objects.get(username="staff"))
    User.objects.get(username="staff").user_permissions.add(
        Permission.objects.get(codename="change_task")
    )
    assert "Send the selected failed tasks again" in editor.get(URL).content.decode()


# -- manage.py htask retry ---------------------------------------------------------------
def htask(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("htask", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.mark.django_db
def test_retry_by_id(fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    a, b = failed_task(now), failed_task(now)
    done = other_task(TaskStatus.CANCELLED)
    out, err = htask("retry", str(a.pk), str(b.pk), str(done.pk))
    assert f"sent again: 2 task(s) ({a.pk}, {b.pk})" in out
    assert f"task {done.pk} is cancelled, not failed: left alone" in err
    assert set(Task.objects.filter(status=TaskStatus.PENDING).values_list("pk", flat=True)) == {
        a.pk,
        b.pk,
    }
    assert Run.objects.filter(task__in=[a, b]).count() == 4


@pytest.mark.django_db
def test_retry_failed_since_a_duration_or_a_date(fake_clock: FakeClock) -> None:
    fake_clock.advance(86400)
    now = fake_clock.now()
    recent = failed_task(now, finished=600)
    old = failed_task(now, finished=7200)
    out, _ = htask("retry", "--failed-since", "1h")
    assert f"sent again: 1 task(s) ({recent.pk})" in out
    assert Task.objects.get(pk=old.pk).status == TaskStatus.FAILED
    out, _ = htask("retry", "--failed-since", (now - timedelta(hours=3)).isoformat())
    assert f"sent again: 1 task(s) ({old.pk})" in out
    out, _ = htask("retry", "--failed-since", "1d")
    assert "no task failed since" in out


def failed_as(now: datetime, kind: str, fn: str = ADD) -> Task:
    """A task failed 60 s before ``now`` with the error a node writes for ``kind``."""
    errors = {
        "error": ("RuntimeError: boom", None),
        "timed-out": (rules.timed_out(30), None),
        "lost": (rules.lost_task_error("n1", 1, 1), None),
        "aborted": (rules.ABORTED, now - timedelta(seconds=61)),
    }
    error, abort = errors[kind]
    return failed_task(now, last_error=error, abort_requested_at=abort, function=fn)


@pytest.mark.django_db
def test_retry_since_leaves_out_timed_out_and_aborted_tasks_unless_asked(
    fake_clock: FakeClock,
) -> None:
    now = fake_clock.now()
    made = {kind: failed_as(now, kind) for kind in ("error", "timed-out", "lost", "aborted")}
    out, err = htask("retry", "--failed-since", "1h", "--dry-run")
    assert out == (
        f"would send again: 2 task(s) ({made['error'].pk}, {made['lost'].pk}); nothing sent\n"
    )
    assert "left out: 1 timed-out task(s) (--status timed-out to send them)" in err
    assert "left out: 1 aborted task(s) (--status aborted to send them)" in err
    assert not Task.objects.filter(status=TaskStatus.PENDING).exists()  # a dry run
    out, _ = htask("retry", "--failed-since", "1h", "--status", "aborted")
    assert out == f"sent again: 1 task(s) ({made['aborted'].pk})\n"
    resent = Task.objects.get(pk=made["aborted"].pk)
    assert (resent.status, resent.abort_requested_at) == (TaskStatus.PENDING, None)
    out, _ = htask("retry", "--failed-since", "1h")
    assert out == f"sent again: 2 task(s) ({made['error'].pk}, {made['lost'].pk})\n"
    assert Task.objects.get(pk=made["timed-out"].pk).status == TaskStatus.FAILED
    out, _ = htask("retry", str(made["timed-out"].pk))  # named: sent whatever ended it
    assert out == f"sent again: 1 task(s) ({made['timed-out'].pk})\n"


@pytest.mark.django_db
def test_retry_filters_by_function_and_error(fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    boom = failed_as(now, "error")
    other = failed_as(now, "error", fn="tests.integration.testapp.tasks:flaky")
    Task.objects.filter(pk=other.pk).update(last_error="ConnectionError: refused")
    out, _ = htask("retry", "--failed-since", "1h", "--function", ADD, "--dry-run")
    assert f"({boom.pk})" in out
    out, _ = htask("retry", "--failed-since", "1h", "--error", "connectionerror", "--dry-run")
    assert f"would send again: 1 task(s) ({other.pk})" in out
    out, _ = htask("retry", "--failed-since", "1h", "--function", "x:y")
    assert out == "no task failed since 2029-12-31 23:00:00 UTC of x:y\n"
    out, err = htask("retry", str(boom.pk), str(other.pk), "--error", "boom")
    assert out == f"sent again: 1 task(s) ({boom.pk})\n"
    assert err == f"task {other.pk}: not failed as the filters ask: left alone\n"
    assert Task.objects.get(pk=other.pk).status == TaskStatus.FAILED


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("retry",), "give task ids or --failed-since"),
        (("retry", "1", "--failed-since", "1h"), "give task ids or --failed-since"),
        (("retry", "--failed-since", "soon"), "--failed-since: 'soon' is neither"),
        (("retry", "424242"), "no task with id 424242: nothing sent"),
    ],
)
def test_retry_usage_errors_exit_2(args: tuple[str, ...], message: str) -> None:
    with pytest.raises(CommandError, match=message) as caught:
        htask(*args)
    assert caught.value.returncode == 2


@pytest.mark.django_db
def test_an_unknown_status_is_refused_naming_the_choices() -> None:
    with pytest.raises(CommandError, match="invalid choice: 'hung' \\(choose from 'error', "):
        htask("retry", "--failed-since", "1h", "--status", "hung")


@pytest.mark.django_db
def test_an_unknown_id_sends_nothing(fake_clock: FakeClock) -> None:
    task = failed_task(fake_clock.now())
    with pytest.raises(CommandError):
        htask("retry", str(task.pk), "424242")
    assert Task.objects.get(pk=task.pk).status == TaskStatus.FAILED


@pytest.mark.django_db
def test_a_failed_task_whose_key_a_newer_task_holds_is_superseded_in_the_admin_and_command(
    fake_clock: FakeClock,
) -> None:
    first, second = failed_task(fake_clock.now()), failed_task(fake_clock.now())
    Task.objects.filter(pk=first.pk).update(key="k1")
    Task.objects.filter(pk=second.pk).update(key="k2")
    schedule(tasks.add, 9, key="k1")
    schedule(tasks.add, 9, key="k2")
    client = _client(superuser=True)
    response = client.post(
        URL, {"action": "send_tasks_again", "_selected_action": [first.pk]}, follow=True
    )
    text = response.content.decode()
    assert "0 failed task(s) sent again" in text
    assert "1 task(s) not sent again: a newer pending task has their key" in text
    out, err = htask("retry", str(second.pk))
    assert "sent again: 0 task(s)" in out
    assert f"task {second.pk}: a newer pending task has its key" in err
    assert set(
        Task.objects.filter(pk__in=[first.pk, second.pk]).values_list("status", flat=True)
    ) == {TaskStatus.CANCELLED}
