"""Queues paused, resumed and limited by an operator, on the database of the pass:
``pause_queue``, ``resume_queue``, ``limit_queue`` and ``list_queues``, ``manage.py
htask queue``, what ``htask status`` and ``runscheduler``'s banner say, a real node
honouring a pause (in process, on the fake clock), and the admin's queue list.
(tests/integration/test_queues.py: the queues a node serves.)"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command, execute_from_command_line
from django.core.management.base import CommandError
from django.db import connections
from django.test import Client
from django.test.utils import CaptureQueriesContext

from django_htask import (
    QueueInfo,
    limit_queue,
    list_queues,
    pause_queue,
    resume_queue,
    schedule,
)
from django_htask.db import scheduler_alias
from django_htask.engine import FakeClock
from django_htask.models import Queue, Task, TaskStatus
from django_htask.queues import QueueStates
from tests.integration.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)

ADD = "tests.integration.testapp.tasks:add"


def htask(*args: str) -> str:
    out = StringIO()
    call_command("htask", *args, stdout=out)
    return out.getvalue()


def add_tasks(queue: str, status: str, n: int) -> None:
    from django_htask import clock

    now = clock.now()
    Task.objects.bulk_create(
        Task(function=ADD, run_at=now, queue_name=queue, status=status) for _ in range(n)
    )


# -- the API ---------------------------------------------------------------------------------
def test_pause_resume_and_limit_say_whether_they_changed_and_make_rows_on_demand(
    fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="django_htask.queue_control")
    assert resume_queue("slow") is False  # no row: running already, none made
    assert limit_queue("slow", None) is False
    assert not Queue.objects.exists()
    assert pause_queue("slow") is True
    fake_clock.advance(5)
    assert pause_queue("slow") is False
    row = Queue.objects.get(name="slow")
    assert (row.paused, row.paused_at) == (True, fake_clock.now() - timedelta(seconds=5))
    assert limit_queue("slow", 3) is True
    assert limit_queue("slow", 3) is False
    assert resume_queue("slow") is True
    assert limit_queue("slow", None) is True
    row.refresh_from_db()
    assert (row.paused, row.paused_at, row.max_running) == (False, None, None)
    said = [
        (r.action, r.getMessage())  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "django_htask.queue_control"
    ]
    assert said == [
        ("queue_paused", "queue slow paused"),
        ("queue_limited", "queue slow limited to 3 tasks running at once"),
        ("queue_resumed", "queue slow resumed"),
        ("queue_limited", "queue slow no longer limited"),
    ]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: pause_queue(""), "a queue name must be 1 to 100 characters"),
        (lambda: resume_queue("a,b"), "got 'a,b'"),
        (lambda: limit_queue("q", 0), "max_running must be from 1 to 100000, got 0"),
        (lambda: limit_queue("q", 2.5), "max_running must be an int >= 1, got 2.5"),
        (lambda: limit_queue("q", True), "max_running must be an int >= 1, got True"),
    ],
)
def test_a_bad_name_or_limit_is_refused_naming_it(call: Callable[[], Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()
    assert not Queue.objects.exists()


def test_the_listing_counts_pending_and_running_tasks_only(fake_clock: FakeClock) -> None:
    add_tasks("default", TaskStatus.PENDING, 3)
    add_tasks("default", TaskStatus.RUNNING, 1)
    add_tasks("default", TaskStatus.SUCCEEDED, 5)
    add_tasks("done", TaskStatus.FAILED, 2)  # finished only: not listed
    add_tasks("slow", TaskStatus.RUNNING, 2)
    pause_queue("slow")
    limit_queue("idle", 4)
    with CaptureQueriesContext(connections[scheduler_alias()]) as queries:
        listed = list_queues()
    assert len(queries.captured_queries) == 2
    assert listed == [
        QueueInfo("default", pending=3, running=1),
        QueueInfo("idle", max_running=4),
        QueueInfo("slow", True, fake_clock.now(), None, 0, 2),
    ]


# -- the command -----------------------------------------------------------------------------
def test_the_command_pauses_resumes_limits_and_lists(fake_clock: FakeClock) -> None:
    add_tasks("reports", TaskStatus.PENDING, 2)
    assert htask("queue", "pause", "reports") == (
        "queue reports now paused: none of its tasks starts, none of its schedules fires\n"
    )
    assert htask("queue", "pause", "reports").startswith("queue reports already paused")
    assert htask("queue", "limit", "reports", "2") == (
        "queue reports now limited to 2 tasks running at once\n"
    )
    assert htask("queue", "list").splitlines() == [
        "queue    state                                 limit  pending  running",
        "reports  paused since 2030-01-01 00:00:00 UTC  2      2        0",
    ]
    assert htask("queue", "resume", "reports") == "queue reports now running\n"
    assert htask("queue", "limit", "reports", "none") == "queue reports now without a limit\n"
    assert htask("queue", "resume", "reports") == "queue reports already running\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["queue", "pause", "a,b"], "without ',' or '\\*', not starting with '-' or a space"),
        (["queue", "limit", "q", "lots"], "the limit must be a whole number or 'none', got 'lots'"),
        (["queue", "limit", "q", "0"], "max_running must be from 1 to 100000, got 0"),
    ],
)
def test_the_command_refuses_a_bad_name_or_limit_with_exit_2(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message) as raised:
        htask(*args)
    assert raised.value.returncode == 2


def test_an_empty_listing_says_so() -> None:
    assert htask("queue", "list") == "no queue paused, limited, or with tasks pending or running\n"


def test_status_and_the_banner_show_the_queues_paused_and_limited(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert "queues:" not in htask("status")
    pause_queue("slow")
    limit_queue("reports", 2)
    assert "queues: paused slow; limited reports 2 (htask queue list)\n" in htask("status")
    execute_from_command_line(["manage.py", "runscheduler", "--batch", "--no-sync"])
    out = capsys.readouterr().out
    assert "  queues:    every queue; paused slow; limited reports 2 (htask queue list)" in out


# -- a node ------------------------------------------------------------------------------------
def test_a_node_leaves_a_paused_queue_s_tasks_until_it_is_resumed(
    make_node: Callable[..., Any], fake_clock: FakeClock
) -> None:
    pause_queue("slow")
    held = schedule(tasks.add, 1, queue_name="slow")
    other = schedule(tasks.add, 2)
    node = make_node(poll_interval=1.0)
    fake_clock.advance(2)
    assert Task.objects.get(pk=other.pk).status == TaskStatus.SUCCEEDED
    assert Task.objects.get(pk=held.pk).status == TaskStatus.PENDING
    assert node.queue_states.paused == {"slow"}
    resume_queue("slow")
    fake_clock.advance(1)  # its next poll
    assert Task.objects.get(pk=held.pk).status == TaskStatus.SUCCEEDED


# -- the admin ---------------------------------------------------------------------------------
ADMIN = "/admin/django_htask/queue/"


@pytest.fixture
def root() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def test_the_queue_list_shows_each_queue_with_tasks_counted_in_one_query(root: Client) -> None:
    def page(queues: int) -> tuple[int, str]:
        for n in range(queues):
            add_tasks(f"q{Queue.objects.count() + n:02d}", TaskStatus.PENDING, 2)
        root.get(ADMIN)  # the rows of new queues are made
        with CaptureQueriesContext(connections[scheduler_alias()]) as queries:
            body = root.get(ADMIN).content.decode()
        return len(queries), body

    few, _ = page(1)
    add_tasks("q00", TaskStatus.RUNNING, 1)
    many, body = page(5)
    assert few == many  # no query per row
    assert Queue.objects.count() == 6
    row = re.search(r"<tr>.*?q00</a></th>(.*?)</tr>", body, re.S)
    assert row is not None
    cells = re.findall(r'<td class="field-(\w+)[^"]*">(.*?)</td>', row.group(1), re.S)
    values = {name: re.sub(r"<[^>]+>", "", value).strip() for name, value in cells}
    assert (values["state"], values["pending"], values["running"]) == ("running", "2", "1")
    assert 'name="form-0-max_running"' in body  # the limit is edited in the list


def test_pause_resume_and_the_limit_from_the_list(root: Client, fake_clock: FakeClock) -> None:
    add_tasks("reports", TaskStatus.PENDING, 1)
    root.get(ADMIN)
    row = Queue.objects.get(name="reports")
    done = root.post(ADMIN, {"action": "pause", "_selected_action": [row.pk]}, follow=True)
    assert "1 queue(s) paused" in done.content.decode()
    row.refresh_from_db()
    assert (row.paused, row.paused_at) == (True, fake_clock.now())
    assert "paused since" in root.get(ADMIN).content.decode()
    edited = root.post(
        ADMIN,
        {
            "form-TOTAL_FORMS": "1",
            "form-INITIAL_FORMS": "1",
            "form-0-id": str(row.pk),
            "form-0-max_running": "3",
            "_save": "Save",
        },
    )
    assert edited.status_code == 302
    assert Queue.objects.states() == QueueStates(frozenset({"reports"}), (("reports", 3),))
    root.post(ADMIN, {"action": "resume", "_selected_action": [row.pk]})
    assert Queue.objects.states() == QueueStates(frozenset(), (("reports", 3),))


def test_a_queue_is_added_by_name_and_a_bad_name_or_limit_is_refused(root: Client) -> None:
    bad = root.post(f"{ADMIN}add/", {"name": "a,b", "max_running": "0"})
    errors = bad.context["adminform"].form.errors
    assert "got 'a,b'" in " ".join(errors["name"])
    assert "max_running must be from 1 to 100000, got 0" in " ".join(errors["max_running"])
    assert root.post(f"{ADMIN}add/", {"name": "later", "max_running": "2"}).status_code == 302
    assert Queue.objects.states().limits == (("later", 2),)


def test_pausing_needs_the_change_permission() -> None:
    user = User.objects.create_user("staff", "s@example.com", "pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_queue"))
    viewer = Client()
    viewer.force_login(user)
    row = Queue.objects.create(name="q")
    page = viewer.get(ADMIN).content.decode()
    assert 'value="pause"' not in page
    viewer.post(ADMIN, {"action": "pause", "_selected_action": [row.pk]})
    assert not Queue.objects.get(pk=row.pk).paused


def test_the_overview_links_to_the_queue_list_and_counts_the_queues_paused(root: Client) -> None:
    pause_queue("slow")
    limit_queue("reports", 2)
    body = root.get("/admin/django_htask/overview/").content.decode()
    card = re.search(r'id="htask-card-queues"><strong>(\d+)</strong><a href="([^"]+)"', body)
    assert card is not None and card.groups() == ("1", ADMIN)
    assert "Queues paused slow; limited reports 2:" in body
