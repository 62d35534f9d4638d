"""The schedule, run, task and node lists on a 1366 x 768 laptop screen, in headless
Chromium, with the data a real site has: long names, cron expressions in several zones,
a broken schedule, long errors, node ids of real hosts.

Every column is on screen without horizontal scrolling, and every time is shown to the
second with its zone (a schedule's own zone beside the site's where they differ).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, expect
from pytest_django.fixtures import Settings
from pytest_django.live_server_helper import LiveServer

from django_htask import schedule
from django_htask.engine import FakeClock
from django_htask.models import Node, Run, RunStatus, Schedule, Task, TaskStatus
from tests.browser.conftest import serve_static
from tests.integration.testapp import tasks

pytestmark = pytest.mark.slow

ADD = "tests.integration.testapp.tasks:add"
BOOM = "tests.integration.testapp.tasks:boom"
PASSWORD = "pw-for-tests"
WIDTH, HEIGHT = 1366, 768
#: A time as the lists show it: to the second, with the zone's abbreviation.
TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [A-Z]{2,5}$|^[+-]\d{2,4}$")
ERROR = (
    "ConnectionError: HTTPSConnectionPool(host='inventory.eu-west-1.internal.example.com', "
    "port=443): Max retries exceeded with url: /api/v2/stock/levels?warehouse=rotterdam-2"
    "&include=reserved,in_transit (Caused by NewConnectionError('<urllib3.connection."
    "HTTPSConnection object at 0x7f3a2c1d5e10>: Failed to establish a new connection: "
    "[Errno 111] Connection refused'))"
)
NODE = "web-3.eu-west-1.prod.example.com-48213-9f3a2c71"


def make(name: str, text: str, zone: str = "UTC", function: str = ADD, **kw: Any) -> Schedule:
    row = Schedule(name=name, function=function, schedule=text, timezone=zone, **kw)
    row.set_call((1,) if function == ADD else ("inventory service timed out",))
    row.save()
    return row


@pytest.fixture
def a_site(fake_clock: FakeClock, settings: Settings) -> None:
    settings.TIME_ZONE = "Europe/Paris"  # the site's zone: UTC schedules show two times
    rows = [
        make("billing.send-monthly-invoices-to-every-customer-in-the-eu", "0 6 1 * *"),
        make("reports.quarterly_financial_statements_for_the_board", "30 4 1 */3 *", "Asia/Tokyo"),
        make("sync-inventory", "*/15 9-17 * * MON-FRI", "America/Los_Angeles", BOOM),
        make("refresh-cache", "@every 10s", "Europe/Paris"),
        make(ADD, "0 3 1,15 * *", "Australia/Sydney"),
        make("nightly-export", "CRON_TZ=Asia/Kolkata 45 23 * * *", "Asia/Kolkata"),
    ]
    Schedule.objects.filter(pk=rows[1].pk).update(
        broken="function 'reports.tasks:quarterly_financial_statements_for_the_board' is "
        "not registered: the stored name is kept, deploy the code that registers it"
    )
    now = fake_clock.now()
    for i, row in enumerate(rows * 4):
        due = now - timedelta(seconds=10 * i)
        failed = row.function == BOOM
        Run.objects.create(
            schedule=row,
            name=row.name,
            function=row.function,
            node=NODE,
            attempt=1 + i % 3,
            scheduled_for=due,
            started_at=due + timedelta(milliseconds=350),
            finished_at=due + timedelta(seconds=2),
            duration=1.65,
            status=RunStatus.FAILED if failed else RunStatus.SUCCEEDED,
            error=ERROR if failed else "",
        )
    for i in range(6):
        schedule(tasks.add, i, delay=3600 * i + 15, max_attempts=5)
    # The ids as a list: MySQL/MariaDB take no LIMIT in an IN subquery.
    Task.objects.filter(pk__in=list(Task.objects.values_list("pk", flat=True)[:3])).update(
        status=TaskStatus.FAILED, last_error=ERROR, attempts=5
    )
    last = Task.objects.order_by("-pk").values_list("pk", flat=True)[0]
    Task.objects.filter(pk=last).update(
        status=TaskStatus.RUNNING, locked_by=NODE, lock="crm-api.eu-west-1.accounts-sync"
    )
    Node.objects.create(
        id=NODE,
        hostname="web-3.eu-west-1.prod.example.com",
        pid=48213,
        started_at=now - timedelta(hours=3),
        last_heartbeat=now,
        version="1.0.0",
        queues="default,reports,billing-eu",
    )


def log_in(page: Page, url: str) -> None:
    get_user_model().objects.create_superuser("admin", "admin@example.com", PASSWORD)
    page.route("**/static/**", serve_static)
    page.set_viewport_size({"width": WIDTH, "height": HEIGHT})
    page.goto(f"{url}/admin/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")


def assert_fits(page: Page, what: str) -> None:
    """No horizontal scrolling, and every column of the list inside the screen."""
    expect(page.locator("#result_list")).to_be_visible()
    scroll = page.evaluate(
        "[document.scrollingElement.scrollWidth, document.scrollingElement.clientWidth]"
    )
    assert scroll[0] <= scroll[1], f"{what}: the page scrolls sideways: {scroll}"
    box = page.locator("#result_list").bounding_box()
    assert box is not None and box["x"] + box["width"] <= WIDTH, (what, box)
    headers = page.locator("#result_list thead th")
    assert headers.count() >= 5
    for i in range(headers.count()):
        th = headers.nth(i).bounding_box()
        assert th is not None and th["x"] + th["width"] <= WIDTH, (what, i, th)
    # The list's own scrolling box (Django wraps it in .results) does not scroll either.
    inner = page.evaluate(
        "(() => { const r = document.querySelector('.results');"
        " return [r.scrollWidth, r.clientWidth]; })()"
    )
    assert inner[0] <= inner[1], f"{what}: the list scrolls sideways: {inner}"


#: The cells of a list column whose text wraps inside a word: a line that starts
#: after a letter or a digit of the same text node (the page's places to wrap, <br>
#: and <wbr>, end a text node).
BROKEN_WORDS = """(column) => {
  const broken = [];
  for (const cell of document.querySelectorAll(`#result_list .field-${column}`)) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    let top = null, before = "";
    while (walker.nextNode()) {
      const text = walker.currentNode;
      before = "";  // a new text node: after a <br>, a <wbr> or a tag
      for (let i = 0; i < text.length; i++) {
        const range = document.createRange();
        range.setStart(text, i);
        range.setEnd(text, i + 1);
        const rects = range.getClientRects();
        if (!rects.length) continue;
        const now = rects[0].top, char = text.data[i], word = /[A-Za-z0-9]/;
        if (top !== null && now > top + 2 && word.test(before) && word.test(char)) {
          broken.push(cell.innerText);
        }
        top = now;
        before = char;
      }
    }
  }
  return broken;
}"""


def broken_words(page: Page, column: str) -> list[str]:
    """The cells of ``column`` that wrap inside a word ("runnin g", "lab.ta sks")."""
    found: list[str] = page.evaluate(BROKEN_WORDS, column)
    return found


def times_in(page: Page, column: str) -> list[list[str]]:
    cells = page.locator(f"#result_list td.field-{column}")
    return [cells.nth(i).locator(".htask-time").all_inner_texts() for i in range(cells.count())]


@pytest.mark.django_db(transaction=True)
def test_the_lists_fit_a_laptop_screen_with_times_to_the_second_and_zone(
    a_site: None, live_server: LiveServer, page: Page
) -> None:
    log_in(page, live_server.url)

    page.goto(f"{live_server.url}/admin/django_htask/schedule/")
    expect(page.locator("#result_list tbody tr")).to_have_count(6)
    assert_fits(page, "schedules")
    assert broken_words(page, "name_and_function") == []
    headers = page.locator("#result_list thead th").all_inner_texts()
    assert [h.strip().upper() for h in headers[1:]] == [
        "NAME",
        "SCHEDULE",
        "NEXT RUN",
        "LAST 10 RUNS",
        "ENABLED",
        "BROKEN",
    ]
    expect(page.locator("#result_list")).to_contain_text("not registered")
    for cell in times_in(page, "next_run"):
        assert all(TIME.match(text) for text in cell), cell
    by_name = dict(
        zip(
            page.locator("#result_list tbody .field-name_and_function").all_inner_texts(),
            times_in(page, "next_run"),
            strict=True,
        )
    )
    tokyo = next(v for k, v in by_name.items() if k.startswith("reports.quarterly"))
    # Its own zone, then the site's: 2030-04-01 04:30 in Tokyo, the evening before in Paris.
    assert tokyo == ["2030-04-01 04:30:00 JST", "2030-03-31 21:30:00 CEST"]
    paris = next(v for k, v in by_name.items() if k.startswith("refresh-cache"))
    assert len(paris) == 1 and paris[0].endswith("CET")  # the site's zone: once
    assert paris[0] == "2030-01-01 01:00:10 CET"  # to the second

    page.goto(f"{live_server.url}/admin/django_htask/run/")
    expect(page.locator("#result_list tbody tr")).to_have_count(24)
    assert_fits(page, "runs")
    for column in ("run_name", "status"):
        assert broken_words(page, column) == [], column
    expect(page.locator("#result_list")).to_contain_text("ConnectionError")
    started = times_in(page, "started")
    assert all(TIME.match(text) for cell in started for text in cell), started
    # The runs of a 10-second job are told apart by their seconds.
    assert len({tuple(cell) for cell in started}) == 24

    page.goto(f"{live_server.url}/admin/django_htask/task/")
    expect(page.locator("#result_list tbody tr")).to_have_count(6)
    assert_fits(page, "tasks")
    expect(page.locator("#result_list")).to_contain_text("crm-api.eu-west-1")  # the lock
    for column in ("function_name", "status"):
        assert broken_words(page, column) == [], column
    due = times_in(page, "due")
    assert all(len(cell) == 1 and cell[0].endswith(("CET", "CEST")) for cell in due), due

    page.goto(f"{live_server.url}/admin/django_htask/node/")
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    assert_fits(page, "nodes")
    assert times_in(page, "heartbeat") == [["2030-01-01 01:00:00 CET"]]


@pytest.mark.django_db(transaction=True)
def test_the_queue_list_fits_and_pauses_resumes_and_limits_a_queue(
    a_site: None, live_server: LiveServer, page: Page
) -> None:
    from django_htask import pause_queue
    from django_htask.models import Queue

    pause_queue("reports")
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}/admin/django_htask/overview/")
    page.click("#htask-card-queues a")
    expect(page.locator("#result_list tbody tr")).to_have_count(2)  # default: its tasks
    assert_fits(page, "queues")
    reports = page.locator("#result_list tbody tr", has_text="reports")
    expect(reports.locator("td.field-state")).to_have_text("paused since 2030-01-01 01:00:00 CET")
    reports.locator("input.action-select").check()
    page.select_option("select[name=action]", "resume")
    page.click("button[name=index]")
    expect(page.locator(".messagelist")).to_contain_text("1 queue(s) resumed")
    reports.locator("input[name$=max_running]").fill("2")
    page.click("input[name=_save]")
    expect(reports.locator("input[name$=max_running]")).to_have_value("2")
    assert Queue.objects.states().limits == (("reports", 2),)
    assert not Queue.objects.states().paused


#: A time as Django writes one by default: "Jan. 1, 2030, 1 a.m.", "Nov. 28, 2026, noon".
DJANGO_TIME = re.compile(r"\b\d{4}, (\d{1,2}(:\d\d)? [ap]\.m\.|midnight|noon)|[ap]\.m\.")


@pytest.mark.django_db(transaction=True)
def test_the_change_pages_show_times_as_the_lists_do(
    a_site: None, live_server: LiveServer, page: Page
) -> None:
    log_in(page, live_server.url)
    run = Run.objects.filter(schedule__timezone="Asia/Tokyo").order_by("pk")[0]
    task = Task.objects.filter(status=TaskStatus.RUNNING).get()
    Task.objects.filter(pk=task.pk).update(started_at=run.started_at)
    schedule_row = Schedule.objects.get(name="refresh-cache")
    pages = {
        "task": (f"task/{task.pk}", "due"),
        "run": (f"run/{run.pk}", "started"),
        "schedule": (f"schedule/{schedule_row.pk}", "next_run"),
        "node": (f"node/{NODE}", "heartbeat"),
    }
    shown = {}
    for what, (path, field) in pages.items():
        page.goto(f"{live_server.url}/admin/django_htask/{path}/change/")
        expect(page.locator("#content h1")).to_be_visible()
        text = page.locator("#content").inner_text()
        assert [m.group(0) for m in DJANGO_TIME.finditer(text)] == [], what
        times = page.locator("fieldset .htask-time").all_inner_texts()
        assert times and all(TIME.match(t) for t in times), (what, times)
        shown[what] = page.locator(f".field-{field} .htask-time").all_inner_texts()
    # The run of a Tokyo schedule: in its zone, then in the site's (Paris).
    assert [t[-3:] for t in shown["run"]] == ["JST", "CET"]
    assert shown["schedule"] == ["2030-01-01 01:00:10 CET"]
    assert shown["node"] == ["2030-01-01 01:00:00 CET"]
    assert shown["task"][0].endswith(("CET", "CEST"))
