"""Tasks composed in the admin: a batch's page (counts, members by status, callbacks),
and on a task's page its batch, what it runs after and what runs after it, and why a
waiting task waits (Django's test client)."""

from __future__ import annotations

import pytest
from django.test import Client

from django_htask import batch, schedule
from django_htask.models import Batch
from tests.integration.test_admin import URL, admin_client_
from tests.integration.testapp import tasks

__all__ = ["admin_client_"]

pytestmark = pytest.mark.django_db


def test_a_batch_s_page_counts_its_members_and_shows_its_callbacks(admin_client_: Client) -> None:
    with batch(name="pages", on_finish=tasks.batch_done, on_success=tasks.batch_done) as b:
        first = schedule(tasks.add, 1)
        schedule(tasks.add, 2, after=[first])
    listing = admin_client_.get(f"{URL}batch/").content.decode()
    assert "pages" in listing and "running: 2 of 2 not ended" in listing
    page = admin_client_.get(f"{URL}batch/{b.id}/change/").content.decode()
    assert f"?batch={b.id}&amp;status=waiting" in page and "1 waiting" in page
    assert "1 pending" in page
    row = Batch.objects.get(pk=b.id)
    assert f"task/{row.on_finish_id}/change/" in page
    assert "on_finish (once every member ended)" in page
    members = admin_client_.get(f"{URL}task/?batch={b.id}").content.decode()
    assert f"task/{first.pk}/change/" in members
    assert f"task/{row.on_finish_id}/change/" not in members  # not a member


def test_a_waiting_task_says_why_and_its_graph_links_both_ways(admin_client_: Client) -> None:
    first = schedule(tasks.add, 1)
    second = schedule(tasks.add, 2)
    after = schedule(tasks.add, 3, after=[first, {"b": second}])
    page = admin_client_.get(f"{URL}task/{after.pk}/change/").content.decode()
    assert "for 2 of the 2 tasks it runs after to succeed" in page
    assert f"task/{first.pk}/change/" in page and f"task/{second.pk}/change/" in page
    assert "→ b" in page
    before = admin_client_.get(f"{URL}task/{first.pk}/change/").content.decode()
    assert "runs before" in before and f"task/{after.pk}/change/" in before


def test_a_callback_says_it_waits_for_its_batch(admin_client_: Client) -> None:
    with batch(on_failure=tasks.batch_done) as b:
        schedule(tasks.add, 1)
    row = Batch.objects.get(pk=b.id)
    page = admin_client_.get(f"{URL}task/{row.on_failure_id}/change/").content.decode()
    assert "the on_failure callback of" in page and f"batch/{b.id}/change/" in page
    assert "called at the first member that fails for good (1 of its 1 members" in page
