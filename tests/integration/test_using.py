"""``using(...)``: the options of ``schedule()`` apart from the task's arguments, and the
short form refusing a keyword that could be either."""

from __future__ import annotations

import asyncio
import inspect
from datetime import timedelta

import pytest

from django_htask import schedule, using
from django_htask.api import SCHEDULE_OPTIONS, option_parameters
from django_htask.engine import FakeClock
from django_htask.models import Schedule, Task
from django_htask.operations import run_schedule_soon
from django_htask.retry import RetryPolicy
from tests.integration.testapp import tasks

pytestmark = pytest.mark.django_db


def test_the_options_are_the_keywords_of_schedule() -> None:
    keyword_only = [
        p.name
        for p in inspect.signature(schedule).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    assert tuple(keyword_only) == SCHEDULE_OPTIONS


def test_a_functions_parameters_named_like_options_are_those_a_keyword_can_give() -> None:
    assert option_parameters(tasks.fetch) == ("retry", "key")  # timeout: positional-only
    assert option_parameters(tasks.add) == ()


def test_using_sets_the_options_and_passes_every_keyword_to_the_function(
    fake_clock: FakeClock,
) -> None:
    task = using(key="fetch:1", timeout=30, delay=60).schedule(
        tasks.fetch, "https://example.com", 5.0, retry=2, key="k"
    )
    row = Task.objects.get(pk=task.pk)
    assert row.call == (("https://example.com", 5.0), {"retry": 2, "key": "k"})
    assert (row.key, row.timeout) == ("fetch:1", 30.0)
    assert row.run_at == fake_clock.now() + timedelta(seconds=60)


def test_using_by_the_functions_name_and_added_to() -> None:
    base = using(queue_name="slow")
    task = base.using(max_attempts=3).schedule("tests.integration.testapp.tasks:fetch", "u")
    assert (task.queue_name, task.max_attempts, task.call) == ("slow", 3, (("u",), {}))
    assert repr(base) == "using(queue_name='slow')"  # unchanged by .using()


@pytest.mark.parametrize(
    ("options", "option"),
    [({"retry": RetryPolicy(attempts=3)}, "retry"), ({"key": "k"}, "key")],
)
def test_the_short_form_refuses_an_option_that_is_also_a_parameter(
    options: dict[str, object], option: str
) -> None:
    with pytest.raises(TypeError) as raised:
        schedule(tasks.fetch, "u", **options)  # type: ignore[arg-type]
    assert str(raised.value) == (
        f"schedule(fetch, ..., {option}=...) is ambiguous: {option} is an option of "
        f"schedule() and a parameter of fetch(); to set the task's {option}, write "
        f"using({option}=...).schedule(fetch, ...); to pass the argument, write "
        f"using().schedule(fetch, ..., {option}=...) (or pass it by position)"
    )
    assert not Task.objects.exists()


def test_the_short_form_still_serves_what_it_did() -> None:
    """Options named like no keyword parameter, a positional-only one, or left at their
    default; arguments by position."""
    task = schedule(tasks.fetch, "u", 5.0, 1, timeout=7, lock="fetching", key=None)
    assert (task.call, task.timeout, task.lock) == ((("u", 5.0, 1), {}), 7.0, "fetching")
    by_name = schedule("tests.integration.testapp.tasks:add", 1, key="add:1")
    assert by_name.key == "add:1"


def test_using_names_an_option_it_does_not_know() -> None:
    with pytest.raises(TypeError, match=r"using\(\) got 'priorty': not an option of schedule\(\)"):
        using(priorty=3)


def test_schedule_many_takes_keys_in_its_calls_not_from_using() -> None:
    with pytest.raises(TypeError, match="schedule_many\\(\\) takes key in each call"):
        using(key="k").schedule_many([(tasks.add, (1,), {})])
    done = using(queue_name="q", batch_size=1).schedule_many(
        [(tasks.fetch, ("u",), {"key": "a"}), (tasks.fetch, ("v",), {"retry": 1})]
    )
    assert [(t.queue_name, t.call) for t in done] == [
        ("q", (("u",), {"key": "a"})),
        ("q", (("v",), {"retry": 1})),
    ]


@pytest.mark.django_db(transaction=True)  # asgiref's thread has a connection of its own
def test_using_from_async_code() -> None:
    task = asyncio.run(using(key="async:1").aschedule(tasks.fetch, "u", key="arg"))
    assert (task.key, task.call) == ("async:1", (("u",), {"key": "arg"}))


def test_a_disabled_schedule_run_by_hand_passes_its_keywords_to_the_function() -> None:
    """The admin's "run now" of a disabled schedule queues its call once: a keyword of
    the call named like an option of schedule() is the call's, not an option."""
    row = Schedule(
        name="fetching",
        function="tests.integration.testapp.tasks:fetch",
        schedule="@daily",
        enabled=False,
    )
    row.set_call(("u",), {"key": "k", "retry": 2})
    row.save()
    assert run_schedule_soon(row).startswith("is disabled, so it was queued once as task ")
    [task] = Task.objects.all()
    assert (task.call, task.key) == ((("u",), {"key": "k", "retry": 2}), None)
