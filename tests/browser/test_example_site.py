"""End to end in headless Chromium, against the example project's ``runserver`` and
``runscheduler`` started by the test: the admin's schedule form and actions, and the
reminders site (create, snooze, cancel, watch one fire)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from .example_site import PASSWORD, USER, example_site, scheduler_log

pytestmark = pytest.mark.slow

RUN_WAIT = 30_000  # ms: a run is written within a poll or two; generous for a busy CI
#: The start of a log line of the example's: its time, to the second, with the zone.
LOGGED = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC (INFO|WARNING|ERROR) django_htask\.")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("example")


@pytest.fixture(scope="module")
def site(folder: Path) -> Iterator[str]:
    with example_site(folder) as url:
        yield url


def sign_in(page: Page, url: str) -> None:
    page.goto(url)
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    page.fill("#id_username", USER)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Reminders")


def test_admin_schedule_invalid_cron_fix_preview_and_run_now(site: str, page: Page) -> None:
    page.goto(f"{site}/admin/login/")
    page.fill("#id_username", USER)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    expect(page.locator("#site-name")).to_be_visible()

    page.goto(f"{site}/admin/django_htask/schedule/add/")
    page.fill("#id_name", "browser-job")
    page.select_option("#id_function", "example.tasks:digest")
    page.fill("#id_timezone", "Asia/Tokyo")
    page.fill("#id_schedule", "0 9 * * *")
    live = page.locator("#htask-live-preview table.htask-preview tbody tr")
    expect(live).to_have_count(5)  # previewed while typing, before any save
    expect(live.first).to_contain_text("09:00:00 JST")
    page.fill("#id_schedule", "61 * * * *")
    expect(page.locator("#htask-live-preview .htask-preview-error")).to_contain_text("61")
    page.fill("#id_call_kwargs", '{"greeting": "from the browser"}')
    page.click("input[name=_continue]")
    error = page.locator(".field-schedule .errorlist")
    expect(error).to_contain_text("61")
    # The preview beside the error is of what was typed, not a schedule that parses.
    expect(page.locator("#htask-live-preview .htask-preview-error")).to_contain_text("61")
    expect(page.locator("#htask-live-preview table")).to_have_count(0)

    page.fill("#id_schedule", "*/5 * * * *")
    page.click("input[name=_continue]")
    expect(page.locator(".messagelist")).to_contain_text("was added successfully")
    rows = page.locator("table.htask-preview tbody tr")
    expect(rows).to_have_count(5)
    expect(rows.first).to_contain_text("JST")
    expect(rows.first).to_contain_text("UTC")
    page.uncheck("#id_enabled")  # the live preview follows the enabled flag too
    expect(page.locator("#htask-live-preview")).to_have_text("disabled: no runs")
    page.check("#id_enabled")
    expect(rows).to_have_count(5)
    heads = page.locator("#htask-live-preview thead th")
    expect(heads).to_have_text(["Asia/Tokyo", "UTC"])
    page.fill("#id_timezone", "UTC")  # the site's zone: one column, not two identical ones
    expect(heads).to_have_text(["UTC"])
    expect(rows.first.locator("td")).to_have_count(1)
    page.fill("#id_timezone", "Asia/Tokyo")
    expect(heads).to_have_count(2)

    page.goto(f"{site}/admin/django_htask/schedule/?q=browser-job")
    page.locator("input.action-select").first.check()
    page.select_option("select[name=action]", "run_now")
    page.click("button[name=index]")
    expect(page.locator(".messagelist")).to_contain_text("'browser-job' is due now")

    page.goto(f"{site}/admin/django_htask/run/?q=browser-job")
    deadline = time.monotonic() + RUN_WAIT / 1000
    row = page.locator("#result_list tbody tr", has_text="browser-job")

    def finished() -> bool:  # the run row is written "running" when it fires
        return row.count() > 0 and "succeeded" in row.first.inner_text()

    while not finished() and time.monotonic() < deadline:
        page.wait_for_timeout(300)
        page.reload()  # the page does not update by itself: look again
    expect(row.first).to_contain_text("succeeded")


def test_reminders_create_snooze_cancel_and_fire(site: str, folder: Path, page: Page) -> None:
    sign_in(page, site)

    def create(text: str, delay: str) -> None:
        page.fill("#id_text", text)
        page.select_option("#id_delay", delay)
        page.click("#new-reminder button[type=submit]")
        expect(page.locator(".messages")).to_contain_text(f"reminder '{text}' set")

    create("snooze me", "3600")
    snooze_row = page.locator('#reminders tr[data-text="snooze me"]')
    due_before = snooze_row.locator("td").nth(1).inner_text()
    snooze_row.get_by_role("button", name="Snooze 5 min").click()
    expect(page.locator(".messages")).to_contain_text("'snooze me' snoozed to")
    expect(snooze_row).to_contain_text("snoozed: 1")
    assert snooze_row.locator("td").nth(1).inner_text() != due_before

    create("cancel me", "3600")
    cancel_row = page.locator('#reminders tr[data-text="cancel me"]')
    link = cancel_row.get_by_role("link", name="cancel")
    href = link.get_attribute("href") or ""
    assert re.fullmatch(r"/cancel/[A-Za-z0-9_-]{32}/", href), href
    link.click()
    page.get_by_role("button", name="Cancel the reminder").click()
    expect(page.locator(".messages")).to_contain_text("'cancel me' cancelled")
    expect(cancel_row.locator("td").nth(2)).to_have_text("cancelled")

    create("fire soon", "10")
    fire_row = page.locator('#reminders tr[data-text="fire soon"]')
    expect(fire_row.locator("td").nth(2)).to_have_text("scheduled")
    # The page reloads itself every 2 s while reminders are scheduled.
    expect(fire_row.locator("td").nth(2)).to_contain_text("done at", timeout=RUN_WAIT)
    # A success writes no run row: the list reads it from the task's row.
    fired = page.locator("#latest-runs tr", has_text="example.tasks:fire_reminder")
    expect(fired.first).to_contain_text("succeeded")
    expect(snooze_row.locator("td").nth(2)).to_have_text("scheduled")
    expect(cancel_row.locator("td").nth(2)).to_have_text("cancelled")
    # The scheduler's log lines start with their time: its start, the reminder's run.
    lines = scheduler_log(folder).splitlines()
    started = [line for line in lines if re.search(r"node \S+ started: ", line)]
    fired = [line for line in lines if re.search(r"reminder \d+ fired", line)]
    assert started and fired, lines
    assert all(LOGGED.match(line) for line in started + fired), lines
