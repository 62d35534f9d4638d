"""Limits per key and rate limits on SQLite: what ``@task``, ``schedule()`` and
``schedule_many()`` store and refuse (docs/howto-exactly-one.md); the claims
themselves are the store contract's (tests/contract/test_store.py)."""

from __future__ import annotations

import enum
import io
import re
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from django_htask import schedule, schedule_many, task
from django_htask.engine import FakeClock
from django_htask.flow import RateLimit
from django_htask.models import Node, Task
from django_htask.overview import Waiting, waiting_on_gates, why_waiting
from django_htask.store import get_store
from tests.integration.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


class Plan(enum.Enum):
    GOLD = "gold"


def stored(task: Task) -> tuple[Any, ...]:
    return (task.per_key, task.max_running, task.rate_limit, task.rate_period)


def test_a_call_s_per_key_is_the_value_of_its_per_argument_as_the_worker_binds_it() -> None:
    assert stored(schedule(tasks.per_account, 7)) == ("7", 2, None, None)
    assert stored(schedule(tasks.per_account, label="x", account_id=8)) == ("8", 2, None, None)
    assert stored(schedule(tasks.rated, 1)) == ("a", None, 2, 10)  # its default
    key = uuid.UUID(int=5)
    assert stored(schedule(tasks.rated, 1, account=key)) == (str(key), None, 2, 10)
    assert stored(schedule(tasks.rated, 1, account=Plan.GOLD)) == ("gold", None, 2, 10)
    rows = Task.objects.order_by("id").values_list("per_key", "rate_limit", "rate_period")
    assert list(rows)[-1] == ("gold", 2, 10)


def test_a_call_s_rate_limit_and_limit_override_the_function_s_and_keep_its_per() -> None:
    own = schedule(tasks.rated, 1, account="b", rate_limit="100/m", max_running=3)
    assert stored(own) == ("b", 3, 100, 60)
    plain = schedule(tasks.add, 1, rate_limit=RateLimit(5, 3600))
    assert stored(plain) == (None, None, 5, 3600)  # no per=: the function's flow
    assert stored(schedule(tasks.add, 2)) == (None, None, None, None)


def test_schedule_many_stores_each_call_s_per_key_and_one_rate_limit_for_all() -> None:
    made = schedule_many(
        [(tasks.per_account, (n,), {}) for n in (1, 2)] + [(tasks.add, (1,), {})],
        rate_limit="20/s",
    )
    assert [stored(t) for t in made] == [("1", 2, 20, 1), ("2", 2, 20, 1), (None, None, 20, 1)]


@pytest.mark.parametrize(
    ("account", "message"),
    [
        ([1, 2], "per='account': the value of account must be a str, an int or a UUID to be "
         "a key, got [1, 2]"),
        (None, "the value of account must be a str, an int or a UUID to be a key, got None"),
        (True, "to be a key, got True"),
        ("x" * 201, "per='account': the value of account must be at most 200 characters as a "
         "key, got 201"),
    ],
)  # fmt: skip
def test_a_per_value_that_cannot_be_a_key_is_refused_naming_it(account: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        schedule(tasks.rated, 1, account=account)
    with pytest.raises(ValueError, match=r"^calls\[1\]: .*" + re.escape(message)):
        schedule_many([(tasks.rated, (1,), {}), (tasks.rated, (2,), {"account": account})])
    assert not Task.objects.exists()


@pytest.mark.parametrize(
    ("rate_limit", "error", "message"),
    [
        ("100/w", ValueError, "rate_limit must be starts per period, as '100/m', '20/s', "
         "'1000/h', '5000/d' or '10/5m', got '100/w'"),
        ("0/m", ValueError, "rate_limit must allow 1 to 100000 starts, got 0 in '0/m'"),
        ("1/2d", ValueError, "rate_limit must allow 1 to 86400 seconds, got 172800 in '1/2d'"),
        (100, TypeError, "rate_limit must be a str such as '100/m', got 100"),
    ],
)  # fmt: skip
def test_a_bad_rate_limit_is_refused_naming_it(
    rate_limit: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        schedule(tasks.add, 1, rate_limit=rate_limit)
    with pytest.raises(error, match=re.escape(message)):
        schedule_many([(tasks.add, (1,), {})], rate_limit=rate_limit)
    with pytest.raises(error, match=re.escape(message)):
        task(rate_limit=rate_limit)(tasks.add)
    assert not Task.objects.exists()


def _stray(a: int, *rest: int, **more: int) -> None: ...


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"per": "b"}, "per='b' names no parameter of _stray()"),
        ({"per": "rest"}, "per='rest' names no parameter of _stray()"),
        ({"per": "more"}, "per='more' names no parameter of _stray()"),
        ({"per": "a b"}, "per must name a parameter of the function, got 'a b'"),
    ],
)
def test_a_bad_per_or_rate_limit_is_refused_by_task_naming_it(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        task(**options)(_stray)


@task(per="n", name="tests.integration.test_flow:keyed_only")
def keyed_only(n: int) -> None:
    """``per=`` alone: the calls given a limit count apart by ``n``."""


def test_a_per_without_a_limit_stores_no_per_key() -> None:
    assert stored(schedule(keyed_only, 3)) == (None, None, None, None)
    assert stored(schedule(keyed_only, 3, max_running=1)) == ("3", 1, None, None)


# -- what waits, and why ---------------------------------------------------------------
def claim(now: datetime, limit: int = 10) -> list[int]:
    """Start what a node would, at ``now`` (the SQLite store)."""
    store = get_store()
    if not Node.objects.exists():
        store.register_node("n1", "host", 1, "0", now)
    return [t.id for t in store.start_tasks("n1", now, limit, now + timedelta(minutes=5))]


def test_the_overview_and_htask_status_show_what_waits_on_keys_and_rate_limits(
    fake_clock: FakeClock,
) -> None:
    now = fake_clock.now()
    for n in range(3):
        schedule(tasks.per_account, 1, str(n))
    schedule(tasks.per_account, 2)
    schedule_many([(tasks.rated, (n,), {"account": "b"}) for n in range(2)])
    flow = "tests.integration.testapp.tasks:"
    assert waiting_on_gates(now) == [
        Waiting("key", f"{flow}per_account[1]", 3),
        Waiting("key", f"{flow}per_account[2]", 1),
        Waiting("rate", f"{flow}rated[b]", 2),
    ]
    out = io.StringIO()
    call_command("htask", "status", stdout=out)
    text = out.getvalue()
    assert f"waiting on max_running per key: {flow}per_account[1] 3, {flow}per_account[2] 1" in (
        text
    )
    assert f"waiting on rate limits: {flow}rated[b] 2" in text


def test_a_waiting_task_says_why_on_its_admin_page(fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    keyed = [schedule(tasks.per_account, 1, str(n)) for n in range(3)]
    rated = [schedule(tasks.rated, n, account="b") for n in range(3)]
    behind = schedule(tasks.rated, 9, account="c", lock="busy")
    after = schedule(tasks.rated, 10, account="c")
    holder = schedule(tasks.add, 1, lock="busy", at=now - timedelta(seconds=1))
    assert sorted(claim(now)) == sorted(
        [holder.pk, *(t.pk for t in keyed[:2]), *(t.pk for t in rated[:2])]
    )
    room = (now + timedelta(seconds=10)).strftime("%Y-%m-%d %H:%M:%S.%f")
    flow = "tests.integration.testapp.tasks:"
    assert why_waiting(keyed[2], now) == [
        f"2 of {flow}per_account[1] running: its max_running of 2"
    ]
    assert why_waiting(rated[2], now) == [
        f"2 starts of {flow}rated[b] in the last 0:00:10: its rate limit of 2/10s; "
        f"room at {room} UTC"
    ]
    assert why_waiting(behind, now) == ["its lock 'busy' is held by a running task"]
    assert why_waiting(after, now) == [
        f"an earlier task of {flow}rated[c] waits: its tasks start in due order"
    ]
    assert why_waiting(holder, now) == []  # running
    user = User.objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(user)
    page = client.get(f"/admin/django_htask/task/{rated[2].pk}/change/").content.decode()
    assert "Waits on" in page
    assert "its rate limit of 2/10s" in page
