"""``set_progress``: what a task reports while it runs, on its row, read by
``get_result`` and shown by the admin; cleared when it is sent again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from django_htask import get_result, schedule, set_progress
from django_htask.engine import FakeClock
from django_htask.models import Task, TaskStatus
from django_htask.operations import send_again
from tests.integration.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)

MakeNode = Callable[..., Any]


def ran(make_node: MakeNode, fake_clock: FakeClock, fn: Any, *args: Any) -> Task:
    make_node()
    row = schedule(fn, *args)
    fake_clock.advance(0)
    row.refresh_from_db()
    return row


def test_the_last_report_is_kept_and_read_by_get_result(
    make_node: MakeNode, fake_clock: FakeClock
) -> None:
    row = ran(make_node, fake_clock, tasks.reports, 3)
    result = get_result(row.token)
    assert (result.status, result.value, result.progress) == (
        TaskStatus.SUCCEEDED,
        3,
        {"done": 3, "of": 3},
    )


def test_an_async_task_reports_with_aset_progress(
    make_node: MakeNode, fake_clock: FakeClock
) -> None:
    row = ran(make_node, fake_clock, tasks.areports, "half")
    assert get_result(row.token).progress == ["async", "half"]


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        (b"raw", "ValueError: set_progress() takes what JSON holds, got b'raw'"),
        ("x" * 70_000, "ValueError: set_progress() takes at most 65536 bytes of JSON, got 70002"),
    ],
)
def test_a_report_json_cannot_hold_fails_the_run_naming_it(
    make_node: MakeNode, fake_clock: FakeClock, extra: Any, error: str
) -> None:
    row = ran(make_node, fake_clock, tasks.reports, 1, extra)
    assert row.status == TaskStatus.FAILED
    assert row.last_error.startswith(error), row.last_error
    assert row.progress == {"done": 1, "of": 1}  # the reports before it stand


def test_outside_a_task_it_is_refused() -> None:
    with pytest.raises(RuntimeError, match="for the function of a one-off task while it runs"):
        set_progress(1)


def test_the_admin_shows_it_and_sending_again_clears_it(
    make_node: MakeNode, fake_clock: FakeClock
) -> None:
    node = make_node()
    row = schedule(tasks.reports, 2)
    fake_clock.advance(0)
    # Stopped first: sent again, the task wakes the nodes of this process at once, and a
    # node running it again would report anew before the read below.
    node.stop(timeout=5)
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    page = client.get(f"/admin/django_htask/task/{row.pk}/change/").content.decode()
    assert "<pre>{\n &quot;done&quot;: 2,\n &quot;of&quot;: 2\n}</pre>" in page
    Task.objects.filter(pk=row.pk).update(status=TaskStatus.FAILED)
    send_again([row.pk])
    assert Task.objects.get(pk=row.pk).progress is None
