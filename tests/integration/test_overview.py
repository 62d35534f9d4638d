"""The admin's scheduler overview: its data (nodes, the last and next 24 hours), its
charts, its permissions, and each schedule's strip of last runs (Django's test client,
on a fake clock at 2030-01-01 00:00 UTC)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from django_htask.admin.overview import data as overview_data
from django_htask.admin.overview import timeline as overview_timeline
from django_htask.admin.overview.data import next_hours, read_overview
from django_htask.admin.strip import recent_runs
from django_htask.engine import FakeClock, IntervalSchedule, parse_schedule
from django_htask.models import Run, RunStatus, Schedule, Task, TaskStatus
from tests.integration.node_rows import node_row

pytestmark = pytest.mark.django_db

ADD = "tests.integration.testapp.tasks:add"
URL = "/admin/django_htask/"
OVERVIEW = f"{URL}overview/"


@pytest.fixture
def root() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def staff(*perms: str, is_staff: bool = True) -> Client:
    user = User.objects.create_user("staff", "staff@example.com", "pw", is_staff=is_staff)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = Client()
    client.force_login(user)
    return client


def make(name: str, text: str = "@every 1m", **kwargs: Any) -> Schedule:
    row = Schedule(name=name, function=ADD, schedule=text, **kwargs)
    row.set_call((1,))
    row.save()
    return row


def run(row: Schedule | None, status: str, started_at: Any, late: float = 0.0, **kw: Any) -> Run:
    return Run.objects.create(
        schedule=row,
        name=row.name if row else ADD,
        function=ADD,
        status=status,
        started_at=started_at,
        scheduled_for=started_at - timedelta(seconds=late),
        finished_at=started_at,
        **kw,
    )


# -- the page and who sees it ------------------------------------------------------------
def test_the_admin_index_links_to_the_overview(root: Client) -> None:
    page = root.get("/admin/").content.decode()
    assert f'<a href="{OVERVIEW}">Scheduler overview</a>' in page
    response = root.get(OVERVIEW)
    assert response.status_code == 200
    body = response.content.decode()
    assert "<h1>Scheduler overview</h1>" in body
    for chart in ("htask-runs-chart", "htask-lateness-chart", "htask-timeline-chart"):
        assert re.search(rf'<svg id="{chart}" class="htask-chart"[^>]* role="img"', body), chart
    assert "<script" not in body.split('id="content-main"')[1]  # no script in the page
    assert "http://" not in body.replace("http://www.w3.org/2000/svg", "")  # nothing fetched


def test_staff_with_the_view_permissions_see_the_overview() -> None:
    client = staff("view_schedule", "view_run", "view_task", "view_node")
    assert client.get(OVERVIEW).status_code == 200
    assert "Scheduler overview" in client.get("/admin/").content.decode()


def test_the_change_permission_counts_as_view() -> None:
    client = staff("change_schedule", "view_run", "change_task", "view_node")
    assert client.get(OVERVIEW).status_code == 200


@pytest.mark.parametrize("missing", ["view_schedule", "view_run", "view_task", "view_node"])
def test_staff_missing_one_view_permission_are_refused(missing: str) -> None:
    perms = {"view_schedule", "view_run", "view_task", "view_node"} - {missing}
    client = staff(*sorted(perms))
    assert client.get(OVERVIEW).status_code == 403
    assert "Scheduler overview" not in client.get("/admin/").content.decode()


def test_a_user_who_is_not_staff_is_sent_to_the_login() -> None:
    client = staff("view_schedule", "view_run", "view_task", "view_node", is_staff=False)
    response = client.get(OVERVIEW)
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_the_overview_has_no_add_change_or_delete_page(root: Client) -> None:
    assert root.get(f"{OVERVIEW}add/").status_code == 404
    assert root.get(f"{OVERVIEW}1/change/").status_code == 404


# -- nodes -------------------------------------------------------------------------------
def test_nodes_show_state_heartbeat_age_and_work(root: Client, fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    node_row("alive", now, silent_for=5)
    node_row("gone", now, silent_for=600)
    stopped = node_row("stopped", now, silent_for=30)
    stopped.stopped_at = now
    stopped.save()
    for status in (TaskStatus.RUNNING, TaskStatus.RUNNING, TaskStatus.PENDING):
        Task.objects.create(function=ADD, run_at=now, status=status, locked_by="alive")
    run(None, RunStatus.RUNNING, now, node="alive", schedule_id=None)
    lines = {line.id: line for line in read_overview().nodes}
    assert lines["alive"].state == "live"
    assert lines["alive"].heartbeat_age == 5
    assert (lines["alive"].leased_tasks, lines["alive"].running_tasks) == (3, 2)
    assert lines["alive"].running_runs == 1
    assert (lines["gone"].state, lines["gone"].heartbeat_age) == ("dead", 600)
    assert lines["stopped"].state == "stopped"
    page = root.get(OVERVIEW).content.decode()
    assert 'data-node="alive" data-state="live"' in page
    assert 'data-node="gone" data-state="dead"' in page


def test_the_retention_and_the_last_pruning(
    root: Client, fake_clock: FakeClock, settings: Any
) -> None:
    settings.HTASK = {"TASK_RETENTION_DAYS": {"failed": 30}, "RUN_RETENTION_DAYS": 0}
    page = root.get(OVERVIEW).content.decode()
    assert "Finished tasks are kept succeeded 7 days, failed 30 days, cancelled 7 days" in page
    assert "runs for ever (RUN_RETENTION_DAYS)" in page
    assert "No node has deleted anything yet." in page
    now = fake_clock.now()
    for name, at, tasks in (("old", now - timedelta(hours=1), 5), ("new", now, 1234)):
        row = node_row(name, now)
        row.pruned_at, row.pruned_tasks, row.pruned_runs = at, tasks, 2 * tasks
        row.save()
    pruning = read_overview().pruning
    assert pruning is not None
    assert (pruning.node, pruning.at, pruning.tasks, pruning.runs) == ("new", now, 1234, 2468)
    page = root.get(OVERVIEW).content.decode()
    assert "Last pruned by <code>new</code> at 2030-01-01 00:00:00" in page
    assert '<strong class="htask-pruned-tasks">1234</strong> finished tasks' in page


# -- the last 24 hours -------------------------------------------------------------------
def test_runs_per_hour_by_outcome(root: Client, fake_clock: FakeClock) -> None:
    now = fake_clock.now()  # 2030-01-01 00:00: the window is 2029-12-31 01:00 to now
    row = make("job")
    for minutes, status in [
        (-30, RunStatus.SUCCEEDED),
        (-40, RunStatus.SUCCEEDED),
        (-50, RunStatus.FAILED),
        (-90, RunStatus.MISSED),
        (-100, RunStatus.SKIPPED),
        (-23 * 60 + 1, RunStatus.SUCCEEDED),  # 01:01 yesterday: the first hour
        (-25 * 60, RunStatus.FAILED),  # before the window
    ]:
        run(row, status, now + timedelta(minutes=minutes))
    run(row, RunStatus.RUNNING, now)  # the current hour
    hours, sampled = overview_data.last_hours(now)
    assert not sampled
    assert len(hours) == 24
    assert hours[0].start == now - timedelta(hours=23)
    assert hours[0].counts[RunStatus.SUCCEEDED] == 1
    by_hour = {h.start.hour: h for h in hours}
    assert by_hour[23].counts == {
        "succeeded": 2,
        "failed": 1,
        "missed": 0,
        "skipped": 0,
        "snoozed": 0,
        "running": 0,
    }
    assert by_hour[22].counts["missed"] == 1 and by_hour[22].counts["skipped"] == 1
    assert by_hour[0].counts["running"] == 1
    assert sum(h.total for h in hours) == 7
    page = root.get(OVERVIEW).content.decode()
    assert re.search(r'data-series="succeeded" data-column="23:00" data-value="2"', page)
    assert re.search(r'data-series="failed" data-column="23:00" data-value="1"', page)
    assert not re.search(r'data-column="22:00" data-value="\d+" [^>]*fill="#c9302c"', page)


def test_lateness_p50_and_p99_per_hour(root: Client, fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    row = make("late")
    started = now - timedelta(minutes=30)
    for seconds in range(1, 101):  # 1 .. 100 s late, in the 23:00 hour
        run(row, RunStatus.SUCCEEDED, started, late=seconds)
    run(row, RunStatus.MISSED, started, late=5000)  # not started: not in the lateness
    for seconds in range(10, 0, -1):  # 1 .. 10 s late, in the 22:00 hour
        run(row, RunStatus.FAILED, started - timedelta(hours=1), late=seconds)
    hours, sampled = overview_data.last_hours(now)
    hour = hours[-2]
    assert hour.start.hour == 23
    assert (hour.p50, hour.p99, hour.lateness_runs) == (50.0, 99.0, 100)
    assert (hours[-3].p50, hours[-3].p99) == (5.0, 10.0)  # nearest rank
    assert hours[-1].p50 is None  # no run in the current hour
    assert not sampled
    page = root.get(OVERVIEW).content.decode()
    assert 'data-series="p50" data-column="23:00" data-value="50"' in page
    assert 'data-series="p99" data-column="23:00" data-value="99"' in page


def test_lateness_is_sampled_above_the_bound(
    fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(overview_data, "LATENESS_SAMPLE", 10)
    now = fake_clock.now()
    row = make("busy")
    for seconds in range(1, 41):
        run(row, RunStatus.SUCCEEDED, now - timedelta(minutes=30), late=seconds)
    hours, sampled = overview_data.last_hours(now)
    assert sampled
    assert hours[-2].counts["succeeded"] == 40  # counts are exact
    assert hours[-2].lateness_runs == 10  # every 4th run by id


def test_the_schedules_failing_most(root: Client, fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    often, sometimes, never = make("often"), make("sometimes"), make("never")
    for i in range(3):
        run(often, RunStatus.FAILED, now - timedelta(minutes=i + 1))
    run(often, RunStatus.SUCCEEDED, now - timedelta(minutes=9))
    run(sometimes, RunStatus.FAILED, now - timedelta(minutes=5))
    for i in range(5):  # failures before the window do not count
        run(sometimes, RunStatus.FAILED, now - timedelta(hours=30, minutes=i))
    run(never, RunStatus.SUCCEEDED, now - timedelta(minutes=5))
    for i in range(5):  # a one-off task's failures: not a schedule's
        run(None, RunStatus.FAILED, now - timedelta(minutes=i + 1))
    failing = overview_data.failing_most(now)
    assert [(f.name, f.failed, f.runs) for f in failing] == [("often", 3, 4), ("sometimes", 1, 1)]
    page = root.get(OVERVIEW).content.decode()
    table = page[page.index('id="htask-failing"') :]
    assert table.index("often") < table.index("sometimes")
    assert f"?schedule__id__exact={often.pk}&amp;status__exact=failed" in table


def test_no_failures_says_so(root: Client, fake_clock: FakeClock) -> None:
    assert 'id="htask-failing-none"' in root.get(OVERVIEW).content.decode()


# -- the next 24 hours -------------------------------------------------------------------
def test_the_timeline_counts_each_occurrence_per_minute(
    root: Client, fake_clock: FakeClock
) -> None:
    now = fake_clock.now()
    make("five", "*/5 * * * *")  # 00:05 .. 23:55: 287 occurrences
    make("hourly-a", "0 * * * *")  # 01:00 .. 23:00: 23
    make("hourly-b", "0 * * * *")  # the same text and next run: counted as one group
    make("off", "* * * * *", enabled=False)
    timeline = next_hours(now)
    assert timeline.start == now
    assert timeline.schedules == 3
    assert timeline.total == 287 + 23 + 23
    assert timeline.per_minute[5] == 1
    assert timeline.per_minute[60] == 3  # 01:00: all three
    assert timeline.per_minute[61] == 0
    busiest = timeline.busiest(3)
    assert busiest == [(now + timedelta(hours=h), 3) for h in (1, 2, 3)]
    page = root.get(OVERVIEW).content.decode()
    assert '<g class="htask-peak" data-index="60" data-value="3">' in page
    table = page[page.index('id="htask-busiest"') :]
    assert "<td>2030-01-01 01:00</td><td>3</td>" in table


def test_an_overdue_schedule_is_counted_then_followed_from_now(fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    row = make("late", "*/10 * * * *")
    Schedule.objects.filter(pk=row.pk).update(next_run_at=now - timedelta(hours=2))
    timeline = next_hours(now)
    assert timeline.overdue == 1
    assert timeline.per_minute[10] == 1  # the next occurrence after now
    assert timeline.total == 143  # 00:10 .. 23:50


def test_a_schedule_firing_more_than_once_a_minute_is_counted_to_the_horizon(
    root: Client, fake_clock: FakeClock
) -> None:
    now = fake_clock.now()
    make("fast", "@every 10s")  # saved at 00:00:00: 00:00:10 .. 23:59:50
    timeline = next_hours(now)
    assert timeline.total == 8639
    assert timeline.per_minute[0] == 5  # 00:00:10 .. 00:00:50
    assert timeline.per_minute[1:] == [6] * 1439
    assert not timeline.partial
    # 60 / 8.57 is not whole: minutes of 7 and 8, every one of the 10,081 counted.
    make("odd", "@every 8.57s")  # 00:00:08.570 .. 23:59:59.430 (k = 1 .. 10081)
    timeline = next_hours(now)
    odd = [n - 6 for n in timeline.per_minute]
    odd[0] += 1
    assert sum(odd) == 86_400_000 // 8570 == 10_081
    assert set(odd) == {7, 8}
    assert odd[:3] == [len(range(8570, 60_000, 8570)), 7, 7]
    # And what the node fires is what was counted: every 8.57 s from the stored time.
    assert odd[240] == sum(1 for k in range(1, 10_082) if 240 * 60_000 <= k * 8570 < 241 * 60_000)
    page = root.get(OVERVIEW).content.decode()
    assert "<strong>18720</strong>occurrences in the next 24 h" in page  # 8,639 + 10,081
    assert "18720 occurrences of 2 enabled schedules" in page
    assert "more than once a minute" not in page
    # The busiest minutes marked are the busiest of the data: the one minute with 6 + 8,
    # then minutes of 6 + 7 (the quietest has 5 + 7).
    assert sorted(set(timeline.per_minute)) == [12, 13, 14]
    assert timeline.per_minute.count(14) == 1
    peaks = re.findall(r'<g class="htask-peak" data-index="(\d+)" data-value="(\d+)">', page)
    assert [int(value) for _, value in peaks] == [14, 13, 13, 13, 13]
    for index, value in peaks:
        assert timeline.per_minute[int(index)] == int(value)
    table = page[page.index('id="htask-busiest"') :]
    assert (table.count("<td>14</td>"), table.count("<td>13</td>")) == (1, 9)


def test_a_sub_minute_schedule_with_an_end_stops_there(fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    row = make("until", "@every 30s", timezone="UTC")
    ended = IntervalSchedule(30, end=now + timedelta(minutes=2, seconds=10))
    Schedule.objects.filter(pk=row.pk).update(schedule=str(ended))
    timeline = next_hours(now)
    assert timeline.total == 4  # 00:00:30, 00:01:00, 00:01:30, 00:02:00
    assert timeline.per_minute[:3] == [1, 2, 1]


def test_sub_minute_crons_and_jittered_intervals_are_followed_to_the_horizon(
    fake_clock: FakeClock,
) -> None:
    now = fake_clock.now()
    make("cron", "*/15 * * * * *")  # a seconds field: 00:00:15 .. 23:59:45
    jittered = make("jitter", "@every 20s jitter=5s")
    walked = []  # the occurrences as the scheduler finds them, one next_after at a time
    parsed, when = parse_schedule(jittered.schedule), jittered.next_run_at
    while when is not None and when < now + timedelta(hours=24):
        walked.append(when)
        when = parsed.next_after(when)
    timeline = next_hours(now)
    assert 24 * 3600 / 25 < len(walked) < 24 * 3600 / 20
    assert timeline.total == 4 * 1440 - 1 + len(walked)
    assert timeline.per_minute[0] == 3 + sum(1 for w in walked if w < now + timedelta(minutes=1))
    assert not timeline.partial


def test_past_the_budget_a_schedule_counts_only_its_next_run(fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    make("a", "*/5 * * * *")
    make("b", "*/7 * * * *")  # next at 00:07
    timeline = next_hours(now, budget=5)
    assert timeline.partial
    assert timeline.per_minute[5:26:5] == [1, 1, 1, 1, 1]  # a: five occurrences
    assert timeline.per_minute[7] == 1  # b: its stored next run only
    assert timeline.total == 6
    assert not next_hours(now).partial


def test_a_schedule_that_no_longer_parses_is_counted_as_invalid(
    root: Client, fake_clock: FakeClock
) -> None:
    row = make("bad", "*/5 * * * *")
    Schedule.objects.filter(pk=row.pk).update(schedule="61 * * * *")
    timeline = next_hours(fake_clock.now())
    assert timeline.invalid == 1
    assert timeline.total == 1  # its stored next run
    assert root.get(OVERVIEW).status_code == 200


# -- a schedule's last runs --------------------------------------------------------------
def test_recent_runs_are_the_last_twenty_oldest_first(fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    a, b, idle = make("a"), make("b"), make("idle")
    for i in range(25):
        status = RunStatus.FAILED if i % 5 == 0 else RunStatus.SUCCEEDED
        run(a, status, now - timedelta(minutes=25 - i))
    run(b, RunStatus.MISSED, now)
    marks = recent_runs([a.pk, b.pk, idle.pk])
    assert len(marks[a.pk]) == 20
    latest = Run.objects.filter(schedule=a).order_by("-started_at")[:20]
    assert [m.id for m in marks[a.pk]] == [r.pk for r in reversed(latest)]
    assert [m.status for m in marks[b.pk]] == ["missed"]
    assert marks[idle.pk] == []


def test_the_schedule_list_shows_each_strip_in_one_query(
    root: Client, fake_clock: FakeClock
) -> None:
    now = fake_clock.now()

    def page_queries(count: int) -> tuple[int, str]:
        for _ in range(count):
            row = make(f"s{Schedule.objects.count():03d}")
            run(row, RunStatus.SUCCEEDED, now - timedelta(minutes=2))
            run(row, RunStatus.FAILED, now - timedelta(minutes=1), error="ValueError: no")
        with CaptureQueriesContext(connection) as queries:
            body = root.get(f"{URL}schedule/").content.decode()
        return len(queries), body

    few, _ = page_queries(2)
    many, body = page_queries(10)
    assert few == many  # no query per row
    assert body.count('class="htask-strip"') == 12
    assert body.count('<a class="htask-mark" data-status="failed"') == 12
    first = Run.objects.filter(status=RunStatus.FAILED).order_by("pk").first()
    assert first is not None
    assert f'href="{URL}run/{first.pk}/change/"' in body
    assert "ValueError: no" in body  # in the mark's title


def test_the_change_page_shows_the_strip(root: Client, fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    row = make("one")
    first = run(row, RunStatus.SKIPPED, now - timedelta(minutes=1))
    body = root.get(f"{URL}schedule/{row.pk}/change/").content.decode()
    assert f'<a class="htask-mark" data-status="skipped" href="{URL}run/{first.pk}/change/">' in (
        body
    )
    assert f'href="{URL}run/?schedule__id__exact={row.pk}">all</a>' in body


def test_intervals_are_added_up_without_following_them(
    fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = fake_clock.now()
    make("five-a", "@every 5m")  # 00:05 .. 23:55
    make("five-b", "@every 5m")
    make("ninety", "@every 90s")  # 00:01:30 .. 23:58:30
    calls = []
    timeline = next_hours(now, budget=2000)
    monkeypatch.setattr(overview_timeline, "_add", lambda *args: calls.append(args))
    next_hours(now, budget=2000)
    assert len(calls) == 2  # each group's first occurrence: the rest by arithmetic
    assert timeline.total == 2 * 287 + 959
    assert timeline.per_minute[5] == 2
    assert timeline.per_minute[1] == 1 and timeline.per_minute[3] == 1
    assert timeline.per_minute[4] == 1  # 00:04:30
    assert timeline.per_minute[6] == 1  # 00:06:00
    assert not timeline.partial


def test_the_overview_shows_what_waits_on_locks_and_limits_only_when_something_does(
    root: Client,
) -> None:
    from django_htask import schedule
    from tests.integration.testapp import tasks

    assert 'id="htask-waiting"' not in root.get(OVERVIEW).content.decode()
    schedule(tasks.add, 1, lock="account:7")
    schedule(tasks.add, 2, lock="account:7")
    schedule(tasks.serial, "x")
    body = root.get(OVERVIEW).content.decode()
    assert 'id="htask-waiting"' in body
    rows = re.findall(
        r'<tr class="htask-waiting" data-kind="(\w+)"><td>[^<]*</td>'
        r"<td><code>([^<]*)</code></td><td>(\d+)</td>",
        body,
    )
    assert rows == [
        ("lock", "account:7", "2"),
        ("lock", "testapp:serial", "1"),
        ("limit", "tests.integration.testapp.tasks:serial", "1"),
    ]
