"""The numbers a schedule or a task holds are refused out of range by the model fields:
``full_clean()``, model forms and the admin name the value and the range (issue 14,
item 5). The database's CHECK constraints are in ``test_raw_rows.py``."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.forms import modelform_factory
from django.test import Client

from django_htask.admin import ScheduleForm, TaskForm
from django_htask.engine import FakeClock
from django_htask.models import Run, RunStatus, Schedule, Task
from tests.conftest import refused

pytestmark = pytest.mark.django_db

ADD = "tests.integration.testapp.tasks:add"
BOOM = "tests.integration.testapp.tasks:boom"

#: (field, value, what the message says)
SCHEDULE_OUT_OF_RANGE = [
    ("max_attempts", 0, "max_attempts must be from 1 to 1000, got 0"),
    ("max_attempts", 1001, "max_attempts must be from 1 to 1000, got 1001"),
    ("retry_backoff", -100.0, "retry_backoff must be from 0 to 86400 seconds, got -100.0"),
    ("retry_backoff", 1e308, "retry_backoff must be from 0 to 86400 seconds, got 1e+308"),
    ("retry_backoff", math.inf, "retry_backoff must be from 0 to 86400 seconds, got inf"),
    ("retry_backoff", math.nan, "retry_backoff must be from 0 to 86400 seconds, got nan"),
    ("grace", -5.0, "grace must be from 0 to 31536000 seconds, got -5.0"),
    ("grace", 1e308, "grace must be from 0 to 31536000 seconds, got 1e+308"),
    ("grace", math.nan, "grace must be from 0 to 31536000 seconds, got nan"),
]
TASK_OUT_OF_RANGE = [
    ("max_attempts", 0, "max_attempts must be from 1 to 1000, got 0"),
    ("max_attempts", 5000, "max_attempts must be from 1 to 1000, got 5000"),
    ("priority", 101, "priority must be from -100 to 100, got 101"),
    ("priority", -101, "priority must be from -100 to 100, got -101"),
]

SCHEDULE_BOUNDS = {"max_attempts": (1, 1000), "retry_backoff": (0, 86400), "grace": (0, 31536000)}
TASK_BOUNDS = {"max_attempts": (1, 1000), "priority": (-100, 100)}


def nearest(field: str, value: float, bounds: dict[str, tuple[int, int]]) -> float:
    low, high = bounds[field]
    return high if value > high else low


def schedule_row(**values: Any) -> Schedule:
    row = Schedule(name="s", function=ADD, schedule="@every 1m", **values)
    row.set_call((1,))
    return row


def messages(exc: pytest.ExceptionInfo[ValidationError], field: str) -> str:
    return " ".join(exc.value.message_dict.get(field, []))


@pytest.mark.parametrize(("field", "value", "message"), SCHEDULE_OUT_OF_RANGE)
def test_full_clean_refuses_a_schedule_number_out_of_range(
    fake_clock: FakeClock, field: str, value: float, message: str
) -> None:
    row = schedule_row(**{field: value})
    with pytest.raises(ValidationError) as exc:
        row.full_clean()
    assert messages(exc, field) == message
    assert set(exc.value.message_dict) == {field}  # said once, on the field
    setattr(row, field, nearest(field, value, SCHEDULE_BOUNDS))
    row.full_clean()  # the bound itself is in range


@pytest.mark.parametrize(("field", "value", "message"), TASK_OUT_OF_RANGE)
def test_full_clean_refuses_a_task_number_out_of_range(
    fake_clock: FakeClock, field: str, value: int, message: str
) -> None:
    task = Task(function=ADD, payload=b"\x93\xa1x\x90\x80", run_at=fake_clock.now())
    setattr(task, field, value)
    with pytest.raises(ValidationError) as exc:
        task.full_clean()
    assert messages(exc, field) == message
    assert set(exc.value.message_dict) == {field}
    setattr(task, field, nearest(field, value, TASK_BOUNDS))
    task.full_clean()


# -- forms and the admin -----------------------------------------------------------------
def form_data(**overrides: Any) -> dict[str, Any]:
    data = {
        "name": "nightly",
        "function": ADD,
        "schedule": "@every 1m",
        "timezone": "UTC",
        "enabled": "on",
        "call_args": "[1]",
        "call_kwargs": "{}",
        "grace": "",
        "catch_up": "latest",
        "overlap": "skip",
        "max_attempts": "1",
        "retry_backoff": "10",
    }
    data.update(overrides)
    return data


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [(f, v, m) for f, v, m in SCHEDULE_OUT_OF_RANGE if math.isfinite(v)],
)
def test_the_admin_schedule_form_refuses_a_number_out_of_range(
    fake_clock: FakeClock, field: str, value: float, message: str
) -> None:
    form_class = modelform_factory(Schedule, form=ScheduleForm, fields=ScheduleForm.Meta.fields)
    form = form_class(data=form_data(**{field: repr(value)}))
    assert not form.is_valid()
    assert message in form.errors[field]
    assert set(form.errors) == {field}


def test_a_model_form_of_tasks_refuses_a_number_out_of_range(fake_clock: FakeClock) -> None:
    form_class = modelform_factory(
        Task, form=TaskForm, fields=("run_at", "max_attempts", "priority")
    )
    data = {"run_at": "2030-01-01 10:00:00", "max_attempts": "0", "priority": "500"}
    form = form_class(data=data)
    assert not form.is_valid()
    assert form.errors["max_attempts"] == ["max_attempts must be from 1 to 1000, got 0"]
    assert form.errors["priority"] == ["priority must be from -100 to 100, got 500"]


@pytest.fixture
def admin_client_() -> Client:
    user = User.objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db(transaction=True)
def test_the_admin_refuses_a_negative_backoff_and_a_failing_function_is_retried(
    admin_client_: Client, make_node: Any, fake_clock: FakeClock, calls: Any
) -> None:
    """The issue's case: ``retry_backoff=-100`` with ``max_attempts=3`` was saved, and
    the node then raised in its retry path (15 failed runs, 0 retries)."""
    add = "/admin/django_htask/schedule/add/"
    data = form_data(function=BOOM, call_args='["down"]', max_attempts="3")
    refused = admin_client_.post(add, {**data, "retry_backoff": "-100"})
    assert refused.status_code == 200
    errors = refused.context["adminform"].form.errors
    assert errors["retry_backoff"] == ["retry_backoff must be from 0 to 86400 seconds, got -100.0"]
    assert not Schedule.objects.exists()
    saved = admin_client_.post(add, {**data, "retry_backoff": "2"})
    assert saved.status_code == 302
    row = Schedule.objects.get()
    make_node()
    fake_clock.advance(60)  # the occurrence fires and fails: attempt 1
    fake_clock.advance(2)  # the first retry, after the backoff
    fake_clock.advance(4)  # the second, after twice the backoff: the last of 3
    fake_clock.advance(8)  # no fourth attempt
    runs = list(Run.objects.filter(schedule=row).order_by("attempt"))
    assert [(r.attempt, r.status, r.error) for r in runs] == [
        (n, RunStatus.FAILED, "RuntimeError: down") for n in (1, 2, 3)
    ]
    started = [r.started_at for r in runs]
    assert [s - fake_clock.now() if s else None for s in started] == [
        timedelta(seconds=-14),  # 60 s after the start
        timedelta(seconds=-12),  # 2 s later
        timedelta(seconds=-8),  # 4 s after that
    ]
    assert len({r.scheduled_for for r in runs}) == 1  # retries of one occurrence
    assert calls["boom"] == ["down"] * 3


# -- the same ranges for code: schedule() raises ValueError, not IntegrityError, and
# @periodic records it (django_htask.E008)
@pytest.mark.parametrize(("field", "value", "message"), SCHEDULE_OUT_OF_RANGE[1:])
@pytest.mark.usefixtures("declared")
def test_periodic_refuses_out_of_range_numbers_naming_them(
    field: str, value: Any, message: str
) -> None:
    from django_htask import periodic

    def job() -> None:
        pass

    bad = refused(lambda: periodic("@every 1m", **{field: value})(job))
    assert isinstance(bad.error, ValueError)
    assert message in str(bad.error)


def test_schedule_refuses_too_many_attempts_naming_them() -> None:
    from django_htask import schedule

    with pytest.raises(ValueError, match="max_attempts must be from 1 to 1000, got 1001"):
        schedule(ADD, 1, 2, max_attempts=1001)
    assert not Task.objects.exists()
