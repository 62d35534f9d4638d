"""The scheduler overview in headless Chromium, with the data of a real node run.

Two in-process nodes run on the test database for a day of fake-clock time: the first
fires the schedules and runs one-off tasks for 12 hours and stops, nothing runs for 97
minutes (the schedules' occurrences are then late or missed), a second node takes over
for the rest of the day. The page then shows what they recorded; a screenshot of it is
saved for the docs (``docs/_static/overview.png``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, expect
from pytest_django.fixtures import Settings
from pytest_django.live_server_helper import LiveServer

from django_htask import schedule
from django_htask.engine import FakeClock
from django_htask.models import Run, RunStatus, Schedule
from tests.browser.conftest import serve_static
from tests.integration.testapp import tasks

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "docs" / "_static" / "overview.png"
ADD = "tests.integration.testapp.tasks:add"
BOOM = "tests.integration.testapp.tasks:boom"
PASSWORD = "pw-for-tests"
HOUR = 3600.0


def make(name: str, text: str, function: str = ADD, **kwargs: Any) -> Schedule:
    row = Schedule(name=name, function=function, schedule=text, **kwargs)
    row.set_call((1,) if function == ADD else ("inventory service timed out",))
    row.save()
    return row


@pytest.fixture
def a_day_of_runs(make_node: Any, fake_clock: FakeClock, settings: Settings, calls: Any) -> None:
    # A day of fake time: heartbeats and polls every 5 minutes keep it quick.
    settings.HTASK = {
        "RETRY_BACKOFF": 60.0,
        "HEARTBEAT_INTERVAL": 300.0,
        "NODE_TIMEOUT": 900.0,
        "POLL_INTERVAL": 300.0,
        "LEASE": 900.0,
    }
    make("nightly-report", "*/10 * * * *")
    make("send-digest", "0 * * * *")
    make("refresh-cache", "@every 5m", catch_up="all")
    make("sync-inventory", "*/15 * * * *", function=BOOM, grace=60.0)
    make("billing", "30 */2 * * *", function=BOOM, max_attempts=2, retry_backoff=30)
    make("weekly-export", "0 3 * * MON")
    first = make_node(node_id="web-1", poll_interval=300.0)
    for hour in range(12):
        schedule(tasks.add, hour, delay=hour * HOUR + 600)
        if hour % 4 == 0:
            schedule(tasks.boom, "mail server refused", delay=hour * HOUR + 900, max_attempts=2)
        fake_clock.advance(HOUR)
    first.stop(timeout=5)
    fake_clock.advance(1.5 * HOUR + 420)  # no node: occurrences pile up, late or missed
    make_node(node_id="web-2", poll_interval=300.0)
    # An hour at a time, as above: each advance() has 10 real seconds for its work, and
    # ten hours of it in one went past that on a loaded machine.
    for _ in range(10):
        fake_clock.advance(HOUR)
    fake_clock.advance(0.5 * HOUR - 421)


@pytest.mark.django_db(transaction=True)
def test_the_overview_shows_a_real_node_run(
    a_day_of_runs: None, live_server: LiveServer, page: Page
) -> None:
    statuses = set(Run.objects.values_list("status", flat=True))
    assert {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.MISSED} <= statuses
    get_user_model().objects.create_superuser("admin", "admin@example.com", PASSWORD)
    page.route("**/static/**", serve_static)
    page.set_viewport_size({"width": 1180, "height": 900})
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.click("text=Scheduler overview")
    expect(page.locator("h1")).to_have_text("Scheduler overview")

    nodes = page.locator("tr.htask-node")
    expect(nodes).to_have_count(2)
    expect(page.locator('tr[data-node="web-2"] .htask-state')).to_have_text("live")
    expect(page.locator('tr[data-node="web-1"] .htask-state')).to_have_text("stopped")

    runs_chart = page.locator("#htask-runs-chart")
    expect(runs_chart).to_be_visible()
    for status in ("succeeded", "failed", "missed"):
        assert runs_chart.locator(f'rect[data-series="{status}"]').count() > 0, status
    box = runs_chart.bounding_box()
    assert box is not None and box["width"] > 600 and box["height"] > 150
    lateness = page.locator("#htask-lateness-chart")
    expect(lateness.locator('polyline[data-series="p99"]').first).to_be_visible()
    late = [
        float(v)
        for v in lateness.locator('circle[data-series="p99"]').evaluate_all(
            "points => points.map(p => p.dataset.value.replace(',', ''))"
        )
    ]
    assert max(late) >= 60  # the catch-up runs after the gap started late

    failing = page.locator("#htask-failing tbody tr")
    expect(failing.first).to_contain_text("sync-inventory")  # fails at every occurrence
    expect(page.locator("#htask-failing")).to_contain_text("billing")

    timeline = page.locator("#htask-timeline-chart")
    expect(timeline.locator("path.htask-area")).to_be_visible()
    expect(timeline.locator("g.htask-peak").first).to_be_visible()
    expect(page.locator("#htask-busiest tbody tr").first).to_contain_text(":00")

    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.locator("#content").screenshot(path=str(SCREENSHOT), animations="disabled")
    assert 10_000 < SCREENSHOT.stat().st_size < 150_000

    # Each schedule's strip of last runs links to the runs.
    page.goto(f"{live_server.url}/admin/django_htask/schedule/?q=sync-inventory")
    marks = page.locator("svg.htask-strip a.htask-mark")
    expect(marks).to_have_count(10)  # the list's strip; a schedule's page has 20
    expect(
        page.locator('svg.htask-strip a.htask-mark[data-status="failed"]').first
    ).to_be_attached()
    marks.last.click()
    expect(page.locator("h1")).to_have_text("View run")
    expect(page.locator(".field-name .readonly")).to_have_text("sync-inventory")
