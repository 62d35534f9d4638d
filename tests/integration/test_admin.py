"""The admin pages: forms, previews, actions and permissions (Django's test client)."""

from __future__ import annotations

import inspect
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from django_htask import pause_queue, schedule
from django_htask.engine import FakeClock
from django_htask.models import (
    Batch,
    Node,
    Origin,
    Queue,
    Run,
    RunStatus,
    Schedule,
    Task,
    TaskStatus,
)
from django_htask.store import get_store
from tests.integration.node_rows import node_row
from tests.integration.testapp import tasks

pytestmark = pytest.mark.django_db

ADD = "tests.integration.testapp.tasks:add"
URL = "/admin/django_htask/"


@pytest.fixture
def admin_client_() -> Client:
    user = User.objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(user)
    return client


def staff(*perms: str) -> Client:
    return staff_named("staff", *perms)


def staff_named(name: str, *perms: str) -> Client:
    user = User.objects.create_user(name, f"{name}@example.com", "pw", is_staff=True)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def form_data(**overrides: Any) -> dict[str, Any]:
    data = {
        "name": "nightly",
        "function": ADD,
        "schedule": "30 4 * * *",
        "timezone": "Asia/Tokyo",
        "enabled": "on",
        "call_args": "[1]",
        "call_kwargs": '{"b": 2}',
        "grace": "",
        "catch_up": "latest",
        "overlap": "skip",
        "max_attempts": "1",
        "retry_backoff": "10",
    }
    data.update(overrides)
    return data


def make(name: str = "s", text: str = "@every 1m", **kwargs: Any) -> Schedule:
    row = Schedule(name=name, function=ADD, schedule=text, **kwargs)
    row.set_call((1,))
    row.save()
    return row


def errors_of(response: Any, field: str) -> str:
    form = response.context["adminform"].form
    return " ".join(str(e) for e in form.errors.get(field, []))


# -- the schedule form -------------------------------------------------------------------
def test_the_function_field_offers_the_registered_functions(admin_client_: Client) -> None:
    page = admin_client_.get(f"{URL}schedule/add/").content.decode()
    assert f'<option value="{ADD}">' in page
    assert '<option value="custom.name">' in page


def test_an_invalid_cron_shows_the_parser_message_on_the_field(admin_client_: Client) -> None:
    response = admin_client_.post(f"{URL}schedule/add/", form_data(schedule="61 * * * *"))
    assert response.status_code == 200
    message = errors_of(response, "schedule")
    assert "61" in message and "minute" in message
    assert not Schedule.objects.exists()


def test_an_unknown_zone_is_named_on_the_zone_field(admin_client_: Client) -> None:
    response = admin_client_.post(f"{URL}schedule/add/", form_data(timezone="Mars/Olympus"))
    assert "Mars/Olympus" in errors_of(response, "timezone")
    assert not Schedule.objects.exists()


def test_arguments_are_checked_against_the_signature_naming_the_parameter(
    admin_client_: Client,
) -> None:
    response = admin_client_.post(f"{URL}schedule/add/", form_data(call_args='["one"]'))
    assert "'a'" in errors_of(response, "call_args")
    response = admin_client_.post(f"{URL}schedule/add/", form_data(call_kwargs='{"c": 1}'))
    assert "'c'" in errors_of(response, "call_kwargs")
    response = admin_client_.post(f"{URL}schedule/add/", form_data(call_args="[1"))
    assert "not valid JSON" in errors_of(response, "call_args")
    response = admin_client_.post(f"{URL}schedule/add/", form_data(call_kwargs="[1]"))
    assert "JSON object" in errors_of(response, "call_kwargs")
    assert not Schedule.objects.exists()


def test_a_valid_form_saves_the_call_and_the_next_run(
    admin_client_: Client, fake_clock: FakeClock
) -> None:
    response = admin_client_.post(f"{URL}schedule/add/", form_data())
    assert response.status_code == 302, response.context["adminform"].form.errors
    row = Schedule.objects.get(name="nightly")
    assert row.call == ((1,), {"b": 2})
    assert row.origin == Origin.ADMIN
    # 04:30 in Tokyo is 19:30 UTC the day before.
    assert row.next_run_at == fake_clock.now().replace(hour=19, minute=30)


def test_the_change_page_shows_and_edits_the_retry_policy(
    admin_client_: Client, fake_clock: FakeClock
) -> None:
    row = make("retried", max_attempts=3)
    page = admin_client_.get(f"{URL}schedule/{row.pk}/change/").content.decode()
    for name in ("retry_kind", "retry_backoff_max", "retry_jitter", "retry_on", "give_up_on"):
        assert f'name="{name}"' in page
    assert ">Retries</h2>" in page
    policy = {
        "retry_kind": "linear",
        "retry_backoff_max": "120",
        "retry_jitter": "full",
        "retry_on": "ConnectionError, builtins.TimeoutError",
        "give_up_on": "nowhere.Gone",
    }
    url = f"{URL}schedule/{row.pk}/change/"
    response = admin_client_.post(url, form_data(name="retried", **policy))
    assert errors_of(response, "give_up_on") == (
        "give_up_on: exception class 'nowhere.Gone' cannot be imported: No module named 'nowhere'"
    )
    response = admin_client_.post(url, form_data(name="retried", **{**policy, "give_up_on": ""}))
    assert response.status_code == 302, response.context["adminform"].form.errors
    row.refresh_from_db()
    assert (row.retry_kind, row.retry_backoff_max, row.retry_jitter) == ("linear", 120.0, "full")
    assert row.retry_on == "builtins.ConnectionError, builtins.TimeoutError"  # as stored
    response = admin_client_.post(url, form_data(name="retried", retry_backoff_max="-1"))
    assert errors_of(response, "retry_backoff_max") == (
        "retry_backoff_max must be from 0 to 31536000 seconds, got -1.0"
    )


def test_the_change_page_previews_five_runs_in_the_zone_and_in_utc(
    admin_client_: Client, fake_clock: FakeClock
) -> None:
    row = make("tokyo", "30 4 * * *", timezone="Asia/Tokyo")
    page = admin_client_.get(f"{URL}schedule/{row.pk}/change/").content.decode()
    preview = page[page.index("htask-preview") :]
    preview = preview[: preview.index("</table>")]
    assert preview.count("JST") == 5
    # Now is 2030-01-01 09:00 in Tokyo: the first run is the next morning.
    assert "<td>2030-01-02 04:30:00 JST</td><td>2030-01-01 19:30:00 UTC</td>" in preview
    assert "<td>2030-01-06 04:30:00 JST</td><td>2030-01-05 19:30:00 UTC</td>" in preview
    assert "2030-01-07" not in preview
    assert "[1]" in page


def test_the_preview_endpoint_answers_runs_or_the_parser_error(
    admin_client_: Client, fake_clock: FakeClock
) -> None:
    url = f"{URL}schedule/preview/"
    data = admin_client_.get(url, {"schedule": "0 12 * * *", "timezone": "Europe/Paris"}).json()
    assert data["error"] is None
    assert data["runs"][0] == {
        "local": "2030-01-01 12:00:00 CET",
        "site": "2030-01-01 11:00:00 UTC",
    }
    assert (data["zone"], data["site_zone"]) == ("Europe/Paris", "UTC")
    assert len(data["runs"]) == 5
    bad = admin_client_.get(url, {"schedule": "0 12 * * * * *", "timezone": "UTC"}).json()
    assert bad["runs"] == [] and "field" in bad["error"]
    zone = admin_client_.get(url, {"schedule": "@daily", "timezone": "Nowhere/X"}).json()
    assert "Nowhere/X" in zone["error"]
    assert 'id="htask-live-preview"' in admin_client_.get(f"{URL}schedule/add/").content.decode()


def preview_times(page: str) -> list[str]:
    """The last column of the change page's preview table: the site's zone (UTC in the
    tests), or the only column when the schedule's zone reads the same."""
    table = page[page.index('<table class="htask-preview">') :]
    table = table[: table.index("</table>")]
    return re.findall(r"<td>([^<]*)</td></tr>", table)


def test_an_every_schedule_is_previewed_from_its_stored_next_run(
    admin_client_: Client, fake_clock: FakeClock
) -> None:
    row = make("pulse", "@every 45s")  # saved at 00:00:00: next_run_at 00:00:45
    fake_clock.advance(20)  # the page is opened later; the node still fires at 00:00:45
    page = admin_client_.get(f"{URL}schedule/{row.pk}/change/").content.decode()
    expected = [f"2030-01-01 {t} UTC" for t in ("00:00:45", "00:01:30", "00:02:15")]
    assert preview_times(page)[:3] == expected
    live = {"schedule": "@every 45s", "timezone": "UTC", "enabled": "1", "object": row.pk}
    data = admin_client_.get(f"{URL}schedule/preview/", live).json()
    assert [r["site"] for r in data["runs"]][:3] == expected


def test_an_overdue_schedule_is_previewed_as_due_now(
    admin_client_: Client, fake_clock: FakeClock
) -> None:
    row = make("pulse", "@every 45s", timezone="Europe/Paris")
    fake_clock.advance(100)  # no scheduler ran: 00:00:45 is overdue
    page = admin_client_.get(f"{URL}schedule/{row.pk}/change/").content.decode()
    assert (
        "<td>due now (overdue since 2030-01-01 01:00:45 CET)</td>"
        "<td>due now (overdue since 2030-01-01 00:00:45 UTC)</td>"
    ) in page
    assert preview_times(page)[1] == "2030-01-01 00:02:15 UTC"


def test_the_live_preview_of_an_edit_is_what_the_save_stores(
    admin_client_: Client, fake_clock: FakeClock
) -> None:
    row = make("pulse", "@every 45s")
    fake_clock.advance(20)
    url = f"{URL}schedule/preview/"
    edit = {"schedule": "@every 30s", "timezone": "UTC", "enabled": "1", "object": row.pk}
    data = admin_client_.get(url, edit).json()
    assert data["runs"][0]["site"] == "2030-01-01 00:00:50 UTC"  # from now: the save
    off = admin_client_.get(url, {**edit, "enabled": "0"}).json()
    assert (off["runs"], off["note"]) == ([], "disabled: no runs")
    response = admin_client_.post(
        f"{URL}schedule/{row.pk}/change/",
        form_data(name="pulse", schedule="@every 30s", timezone="UTC", call_kwargs=""),
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    row.refresh_from_db()
    assert f"{row.next_run_at:%Y-%m-%d %H:%M:%S} UTC" == data["runs"][0]["site"]


@pytest.mark.django_db(transaction=True)
def test_the_previewed_runs_are_the_runs_the_node_fires(
    admin_client_: Client, fake_clock: FakeClock, make_node: Any, calls: Any
) -> None:
    row = make("pulse", "@every 45s")
    fake_clock.advance(20)
    page = admin_client_.get(f"{URL}schedule/{row.pk}/change/").content.decode()
    previewed = preview_times(page)
    assert len(previewed) == 5
    make_node()
    fake_clock.advance(5 * 45)  # up to 00:04:05, past the fifth run (00:03:45)
    fired = Run.objects.filter(schedule=row).order_by("scheduled_for")
    assert [f"{r.scheduled_for:%Y-%m-%d %H:%M:%S} UTC" for r in fired] == previewed


def test_the_preview_endpoint_needs_a_permission() -> None:
    nobody = staff()
    response = nobody.get(f"{URL}schedule/preview/", {"schedule": "@daily"})
    assert response.status_code == 403


def test_the_list_shows_the_schedule_in_words(admin_client_: Client) -> None:
    make("tokyo", "30 4 * * *", timezone="Asia/Tokyo")
    page = admin_client_.get(f"{URL}schedule/").content.decode()
    assert "every day at 04:30" in page
    page = admin_client_.get(f"{URL}schedule/?q=tokyo").content.decode()
    assert "tokyo" in page
    assert "0 results" not in page


def test_code_defined_schedules_are_read_only_except_enabled(admin_client_: Client) -> None:
    row = make("code", origin=Origin.CODE)
    page = admin_client_.get(f"{URL}schedule/{row.pk}/change/").content.decode()
    assert 'name="enabled"' in page
    assert 'name="schedule"' not in page
    assert 'name="function"' not in page
    response = admin_client_.post(
        f"{URL}schedule/{row.pk}/change/", {"schedule": "@every 5s", "name": "other"}
    )
    assert response.status_code == 302
    row.refresh_from_db()
    assert (row.name, row.schedule, row.enabled) == ("code", "@every 1m", False)


def test_a_failed_save_previews_what_was_typed_not_the_stored_schedule(
    admin_client_: Client, fake_clock: FakeClock
) -> None:
    row = make("pulse", "@every 1m")  # stored: 00:01:00, 00:02:00 …
    url = f"{URL}schedule/{row.pk}/change/"
    typed = form_data(name="pulse", schedule="61 * * * *", timezone="UTC", call_kwargs="")
    page = admin_client_.post(url, typed).content.decode()
    preview = page[page.index('id="htask-live-preview"') :]
    preview = preview[: preview.index("</div>")]
    assert 'data-schedule="61 * * * *"' in preview
    assert "00:01:00" not in preview and "htask-preview-error" in preview
    assert "61" in preview and "not saved" in preview
    # It parses, but the arguments are wrong: the runs of what was typed.
    typed = form_data(name="pulse", schedule="0 12 * * *", timezone="Europe/Paris")
    page = admin_client_.post(url, {**typed, "call_args": '["one"]'}).content.decode()
    preview = page[page.index('id="htask-live-preview"') :]
    assert "<td>2030-01-01 12:00:00 CET</td><td>2030-01-01 11:00:00 UTC</td>" in preview
    assert "00:01:00" not in preview[: preview.index("</div>")]
    row.refresh_from_db()
    assert row.schedule == "@every 1m"


def test_a_failed_add_previews_what_was_typed(admin_client_: Client, fake_clock: FakeClock) -> None:
    page = admin_client_.post(
        f"{URL}schedule/add/", form_data(schedule="@every 10s", timezone="UTC", call_args="[")
    ).content.decode()
    assert "<td>2030-01-01 00:00:10 UTC</td></tr>" in page
    assert not Schedule.objects.exists()


def test_a_schedule_whose_zone_reads_as_the_sites_is_previewed_in_one_column(
    admin_client_: Client, fake_clock: FakeClock, settings: Any
) -> None:
    row = make("pulse", "0 12 * * *", timezone="UTC")
    page = admin_client_.get(f"{URL}schedule/{row.pk}/change/").content.decode()
    assert "<thead><tr><th>UTC</th></tr></thead>" in page
    assert "<tr><td>2030-01-01 12:00:00 UTC</td></tr>" in page
    data = admin_client_.get(f"{URL}schedule/preview/", {"schedule": "@daily"}).json()
    assert data["site_zone"] is None and set(data["runs"][0]) == {"local", "site"}
    settings.TIME_ZONE = "Europe/Paris"  # the site's zone differs: both columns
    page = admin_client_.get(f"{URL}schedule/{row.pk}/change/").content.decode()
    assert "<thead><tr><th>UTC</th><th>Europe/Paris</th></tr></thead>" in page
    assert "<tr><td>2030-01-01 12:00:00 UTC</td><td>2030-01-01 13:00:00 CET</td></tr>" in page


def test_the_function_help_text_is_html_not_rest(admin_client_: Client) -> None:
    page = admin_client_.get(f"{URL}schedule/add/").content.decode()
    assert "<code>@task</code> or <code>@periodic</code>" in page
    assert "``" not in page


def test_a_code_defined_schedule_says_where_its_code_is(admin_client_: Client) -> None:
    page = admin_client_.get(f"{URL}schedule/{make('code', origin=Origin.CODE).pk}/change/")
    page = page.content.decode()
    line = inspect.getsourcelines(tasks.add)[1]  # the line of its decorator
    where = f"tests.integration.testapp.tasks.add in {inspect.getsourcefile(tasks.add)}"
    assert f"Defined in the code, by <code>@periodic</code> on {where}, line {line}" in page
    assert "change it there" in page
    assert "set by the <code>@periodic</code> call too" in page
    gone = make("gone", origin=Origin.CODE)
    Schedule.objects.filter(pk=gone.pk).update(function="old.module:removed")
    page = admin_client_.get(f"{URL}schedule/{gone.pk}/change/").content.decode()
    assert "on old.module:removed (not registered in this process" in page
    mine = make("mine")
    page = admin_client_.get(f"{URL}schedule/{mine.pk}/change/").content.decode()
    assert "Defined in the code" not in page and 'id="htask-live-preview"' in page


# -- times in the lists --------------------------------------------------------------------
def cells(page: str, column: str) -> list[str]:
    """The text of a list column's cells (``field-<column>``), tags stripped."""
    found = re.findall(rf'<td class="field-{column}[^"]*">(.*?)</td>', page, re.DOTALL)
    return [re.sub(r"<br>", " | ", re.sub(r"<(?!br>)[^>]+>", "", c)).strip() for c in found]


def test_the_lists_show_times_to_the_second_with_the_schedules_zone_beside_the_sites(
    admin_client_: Client, fake_clock: FakeClock, settings: Any
) -> None:
    make("paris", "0 22 * * *", timezone="Europe/Paris")
    make("utc", "@every 10s", timezone="UTC")
    page = admin_client_.get(f"{URL}schedule/?o=1").content.decode()
    assert cells(page, "next_run") == [
        "2030-01-01 22:00:00 CET | 2030-01-01 21:00:00 UTC",  # its own zone, then the site's
        "2030-01-01 00:00:10 UTC",  # the same in both: once
    ]
    paris = Schedule.objects.get(name="paris")
    start = fake_clock.now() + timedelta(seconds=10)
    for i in range(2):  # two runs of a 10-second job, ten seconds apart
        Run.objects.create(
            schedule=paris,
            name="paris",
            function=ADD,
            status=RunStatus.SUCCEEDED,
            scheduled_for=start + timedelta(seconds=10 * i),
            started_at=start + timedelta(seconds=10 * i, milliseconds=400),
        )
    page = admin_client_.get(f"{URL}run/?o=3").content.decode()
    assert cells(page, "due") == [
        "2030-01-01 01:00:10 CET | 2030-01-01 00:00:10 UTC",
        "2030-01-01 01:00:20 CET | 2030-01-01 00:00:20 UTC",
    ]
    assert cells(page, "started")[1] == "2030-01-01 01:00:20 CET | 2030-01-01 00:00:20 UTC"
    schedule(tasks.add, 1, delay=75)
    page = admin_client_.get(f"{URL}task/").content.decode()
    assert cells(page, "due") == ["2030-01-01 00:01:15 UTC"]
    assert cells(page, "tries") == ["0 of 1"]
    settings.TIME_ZONE = "Europe/Paris"  # the site's zone: the Paris schedule's, once
    page = admin_client_.get(f"{URL}schedule/?o=1").content.decode()
    assert cells(page, "next_run") == [
        "2030-01-01 22:00:00 CET",
        "2030-01-01 00:00:10 UTC | 2030-01-01 01:00:10 CET",
    ]
    page = admin_client_.get(f"{URL}task/").content.decode()
    assert cells(page, "due") == ["2030-01-01 01:01:15 CET"]


# -- times on the change pages -------------------------------------------------------------
#: A time as Django writes a model field it shows read-only: "Jan. 1, 2030, 1 a.m.".
DJANGO_TIME = re.compile(
    r"[A-Z][a-z]{2,4}\.? \d{1,2}, \d{4}, (\d{1,2}(:\d\d)? [ap]\.m\.|midnight|noon)"
)
#: A time as the lists write it.
LIST_TIME = re.compile(r"\d{4}-\d\d-\d\d</span> <span[^>]*>\d\d:\d\d:\d\d [A-Z]{3,4}<")


def django_times(response: Any) -> list[str]:
    """The model's datetime fields the change page leaves to Django to write (read-only
    ones); and any time written Django's way."""
    adminform = response.context["adminform"]
    model = adminform.form._meta.model
    dates = {
        f.name for f in model._meta.concrete_fields if f.get_internal_type() == "DateTimeField"
    }
    left = [name for name in adminform.readonly_fields if name in dates]
    page = response.content.decode()
    return left + [m.group(0) for m in DJANGO_TIME.finditer(page)] + re.findall(r"[ap]\.m\.", page)


def test_change_pages_show_times_as_the_lists_do(
    admin_client_: Client, fake_clock: FakeClock, settings: Any
) -> None:
    settings.TIME_ZONE = "Europe/Paris"
    now = fake_clock.now()
    paris = make("paris", "0 22 * * *", timezone="Europe/Paris")
    Schedule.objects.filter(pk=paris.pk).update(last_run_at=now - timedelta(hours=2))
    run = Run.objects.create(
        schedule=paris,
        name="paris",
        function=ADD,
        status=RunStatus.SUCCEEDED,
        scheduled_for=now,
        started_at=now,
        finished_at=now + timedelta(seconds=1),
        abort_requested_at=now,
    )
    pending = schedule(tasks.add, 1, delay=60)
    done = schedule(tasks.add, 2)
    Task.objects.filter(pk=done.pk).update(
        status=TaskStatus.SUCCEEDED, started_at=now, finished_at=now, lease_expires_at=now
    )
    node = node_row("n-1", now)
    Node.objects.filter(pk=node.pk).update(stopped_at=now + timedelta(hours=12))
    batch = Batch.objects.create(name="b", failed_at=now, finished_at=now)
    pause_queue("reports")
    queue = Queue.objects.get(name="reports")
    pages = {
        "schedule": f"schedule/{paris.pk}",
        "run": f"run/{run.pk}",
        "pending task": f"task/{pending.pk}",
        "finished task": f"task/{done.pk}",
        "node": f"node/{node.pk}",
        "batch": f"batch/{batch.pk}",
        "queue": f"queue/{queue.pk}",
    }
    for what, path in pages.items():
        response = admin_client_.get(f"{URL}{path}/change/")
        assert response.status_code == 200, what
        assert django_times(response) == [], what
        assert LIST_TIME.search(response.content.decode()), what
    schedule_page = admin_client_.get(f"{URL}schedule/{paris.pk}/change/").content.decode()
    # Its own zone first, the site's below it, as in the list.
    assert "2030-01-01 22:00:00 CET" in schedule_page
    task_page = admin_client_.get(f"{URL}task/{pending.pk}/change/").content.decode()
    assert f"<h2>{ADD} at 2030-01-01 01:01:00 CET (pending)</h2>" in task_page  # its name
    run_page = admin_client_.get(f"{URL}run/{run.pk}/change/").content.decode()
    assert "01:00:01 CET" in run_page  # finished, to the second
    done_page = admin_client_.get(f"{URL}task/{done.pk}/change/").content.decode()
    assert "when its last attempt started" in done_page  # the field's help, kept
    batch_page = admin_client_.get(f"{URL}batch/{batch.pk}/change/").content.decode()
    assert "when its first member failed" in batch_page


def test_a_pending_task_s_time_is_edited_in_django_s_inputs_and_shown_to_a_viewer(
    admin_client_: Client, fake_clock: FakeClock
) -> None:
    pending = schedule(tasks.add, 1, delay=75)
    response = admin_client_.get(f"{URL}task/{pending.pk}/change/")
    page = response.content.decode()
    assert 'name="run_at_0" value="2030-01-01"' in page
    assert 'name="run_at_1" value="00:01:15"' in page
    assert django_times(response) == []
    viewer = staff("view_task")
    response = viewer.get(f"{URL}task/{pending.pk}/change/")
    page = response.content.decode()
    assert 'name="run_at_0"' not in page
    assert '2030-01-01</span> <span class="htask-nowrap">00:01:15 UTC' in page
    assert django_times(response) == []


# -- actions -----------------------------------------------------------------------------
def test_run_now_makes_an_enabled_schedule_due_now(
    admin_client_: Client, fake_clock: FakeClock
) -> None:
    row = make("soon", "@daily")
    version = row.version
    response = admin_client_.post(
        f"{URL}schedule/", {"action": "run_now", "_selected_action": [row.pk]}
    )
    assert response.status_code == 302
    row.refresh_from_db()
    assert row.next_run_at == fake_clock.now()
    assert row.version > version


def test_run_now_on_a_disabled_schedule_queues_a_one_off_task(admin_client_: Client) -> None:
    row = make("off", enabled=False)
    admin_client_.post(f"{URL}schedule/", {"action": "run_now", "_selected_action": [row.pk]})
    task = Task.objects.get()
    assert (task.function, task.call) == (ADD, ((1,), {}))


def test_enable_and_disable_actions(admin_client_: Client, fake_clock: FakeClock) -> None:
    row = make("flip")
    admin_client_.post(f"{URL}schedule/", {"action": "disable", "_selected_action": [row.pk]})
    row.refresh_from_db()
    assert (row.enabled, row.next_run_at) == (False, None)
    admin_client_.post(f"{URL}schedule/", {"action": "enable", "_selected_action": [row.pk]})
    row.refresh_from_db()
    assert row.enabled
    assert row.next_run_at == fake_clock.now() + timedelta(minutes=1)


def test_actions_need_the_change_permission_and_csrf() -> None:
    row = make("guarded", "@daily")
    viewer = staff("view_schedule")
    page = viewer.get(f"{URL}schedule/")
    assert page.status_code == 200
    assert b"run_now" not in page.content
    token = page.cookies["csrftoken"].value
    viewer.post(
        f"{URL}schedule/",
        {"action": "run_now", "_selected_action": [row.pk], "csrfmiddlewaretoken": token},
    )
    before = row.next_run_at
    row.refresh_from_db()
    assert row.next_run_at == before

    Permission_change = Permission.objects.get(codename="change_schedule")
    User.objects.get(username="staff").user_permissions.add(Permission_change)
    # Without the CSRF token the POST is refused.
    refused = viewer.post(f"{URL}schedule/", {"action": "run_now", "_selected_action": [row.pk]})
    assert refused.status_code == 403
    ok = viewer.post(
        f"{URL}schedule/",
        {"action": "run_now", "_selected_action": [row.pk], "csrfmiddlewaretoken": token},
    )
    assert ok.status_code == 302
    row.refresh_from_db()
    assert row.next_run_at != before


# -- runs, tasks, nodes ------------------------------------------------------------------
def test_runs_are_read_only_with_error_and_traceback(admin_client_: Client) -> None:
    row = make("r")
    run = Run.objects.create(
        schedule=row,
        name="r",
        function=ADD,
        status=RunStatus.FAILED,
        node="n1",
        error="RuntimeError: boom",
        traceback="Traceback (most recent call last):\nRuntimeError: boom",
        duration=0.25,
    )
    listing = admin_client_.get(f"{URL}run/?status=failed").content.decode()
    assert "RuntimeError: boom" in listing and "250.0 ms" in listing
    assert admin_client_.get(f"{URL}run/?schedule__id__exact={row.pk}").status_code == 200
    detail = admin_client_.get(f"{URL}run/{run.pk}/change/").content.decode()
    assert "<pre>Traceback (most recent call last):" in detail
    assert 'name="status"' not in detail
    assert admin_client_.get(f"{URL}run/add/").status_code == 403


def test_a_pending_task_can_be_moved_and_cancelled(
    admin_client_: Client, fake_clock: FakeClock
) -> None:
    task = schedule(tasks.add, 1, delay=60)
    Task.objects.filter(pk=task.pk).update(priority=7)
    page = admin_client_.get(f"{URL}task/{task.pk}/change/").content.decode()
    assert 'name="run_at_0"' in page
    assert "Priority" in page and "7" in page
    assert 'name="priority"' not in page  # shown, not editable
    later = fake_clock.now() + timedelta(hours=2)
    response = admin_client_.post(
        f"{URL}task/{task.pk}/change/",
        {"run_at_0": later.strftime("%Y-%m-%d"), "run_at_1": later.strftime("%H:%M:%S")},
    )
    assert response.status_code == 302
    task.refresh_from_db()
    assert task.run_at == later
    admin_client_.post(f"{URL}task/", {"action": "cancel_tasks", "_selected_action": [task.pk]})
    task.refresh_from_db()
    assert task.status == TaskStatus.CANCELLED
    page = admin_client_.get(f"{URL}task/{task.pk}/change/").content.decode()
    assert 'name="run_at_0"' not in page


def test_cancel_needs_the_change_permission() -> None:
    task = schedule(tasks.add, 1, delay=60)
    viewer = staff("view_task")
    token = viewer.get(f"{URL}task/").cookies["csrftoken"].value
    viewer.post(
        f"{URL}task/",
        {"action": "cancel_tasks", "_selected_action": [task.pk], "csrfmiddlewaretoken": token},
    )
    task.refresh_from_db()
    assert task.status == TaskStatus.PENDING


def test_nodes_show_live_or_dead_the_work_they_hold_and_their_stuck_threads(
    admin_client_: Client, fake_clock: FakeClock
) -> None:
    now = fake_clock.now()
    node_row("alive-1", now)
    node_row("gone-2", now, silent_for=3600)
    get_store().heartbeat("alive-1", now, now, stuck=3)
    running = schedule(tasks.add, 1, delay=5)
    Task.objects.filter(pk=running.pk).update(locked_by="alive-1", status=TaskStatus.RUNNING)
    page = admin_client_.get(f"{URL}node/").content.decode()
    rows = {
        m.group(1): m.group(0)
        for m in re.finditer(r"<tr[^>]*>.*?(alive-1|gone-2).*?</tr>", page, re.S)
    }
    assert ">live<" in rows["alive-1"] and ">dead<" in rows["gone-2"]
    assert re.search(r'field-running">1 task, 0 schedule runs; 3 stuck threads<', rows["alive-1"])
    assert re.search(r'field-running">0 tasks, 0 schedule runs<', rows["gone-2"])
    one = admin_client_.get(f"{URL}node/alive-1/change/")
    # Read from the form, not the HTML: Django 6.1 puts a help text between a field's
    # label and its value.
    [stuck] = [
        field
        for fieldset in one.context["adminform"]
        for line in fieldset
        for field in line
        if field.is_readonly and field.field["name"] == "stuck_threads"
    ]
    assert stuck.contents() == "3"
    live_only = admin_client_.get(f"{URL}node/?alive=yes").content.decode()
    assert "alive-1" in live_only and "gone-2" not in live_only


# -- abort (docs/timeouts.md) --------------------------------------------------------------
@pytest.mark.django_db
def test_the_abort_actions_stop_running_tasks_and_runs(
    admin_client_: Client, fake_clock: FakeClock
) -> None:
    running, pending, done = (schedule(tasks.add, n) for n in range(3))
    Task.objects.filter(pk=running.pk).update(status=TaskStatus.RUNNING, locked_by="n1")
    Task.objects.filter(pk=done.pk).update(status=TaskStatus.SUCCEEDED)
    selected = [running.pk, pending.pk, done.pk]
    response = admin_client_.post(
        f"{URL}task/", {"action": "abort_tasks", "_selected_action": selected}, follow=True
    )
    said = [str(m) for m in response.context["messages"]]
    assert said == [
        "abort asked for 1 running task(s), 1 pending task(s) cancelled",
        "1 task(s) not aborted: already finished",
    ]
    assert Task.objects.get(pk=running.pk).abort_requested_at == fake_clock.now()
    assert Task.objects.get(pk=pending.pk).status == TaskStatus.CANCELLED
    row = make()
    going = Run.objects.create(schedule=row, name="s", function=ADD, status=RunStatus.RUNNING)
    over = Run.objects.create(schedule=row, name="s", function=ADD, status=RunStatus.SUCCEEDED)
    response = admin_client_.post(
        f"{URL}run/", {"action": "abort_runs", "_selected_action": [going.pk, over.pk]}, follow=True
    )
    said = [str(m) for m in response.context["messages"]]
    assert said == [
        "abort asked for 1 running run(s)",
        "1 run(s) not aborted: not running, or asked already",
    ]
    assert Run.objects.get(pk=going.pk).abort_requested_at == fake_clock.now()
    assert Run.objects.get(pk=over.pk).abort_requested_at is None


@pytest.mark.django_db
def test_aborting_a_run_takes_the_right_to_change_schedules() -> None:
    Run.objects.create(name="s", function=ADD, status=RunStatus.RUNNING)  # a list to act on
    viewer = staff("view_run")
    page = viewer.get(f"{URL}run/")
    assert b"abort_runs" not in page.content
    allowed = staff_named("allowed", "view_run", "change_schedule")
    assert b"abort_runs" in allowed.get(f"{URL}run/").content


def test_the_task_page_shows_the_result_decoded_escaped_and_cut(admin_client_: Client) -> None:
    from django_htask.engine import encode_result

    row = schedule(tasks.echo, None)
    stored = encode_result({"html": "<b>x</b>"})
    Task.objects.filter(pk=row.pk).update(status=TaskStatus.SUCCEEDED, result=stored)
    page = admin_client_.get(f"{URL}task/{row.pk}/change/").content.decode()
    assert "<pre>{&#x27;html&#x27;: &#x27;&lt;b&gt;x&lt;/b&gt;&#x27;}</pre>" in page
    assert f"({len(stored)} bytes encoded)" in page
    big = schedule(tasks.echo, None)
    Task.objects.filter(pk=big.pk).update(
        status=TaskStatus.SUCCEEDED, result=encode_result("y" * 5000)
    )
    page = admin_client_.get(f"{URL}task/{big.pk}/change/").content.decode()
    assert "y" * 1990 in page and "y" * 2000 not in page  # the repr's quote is one character
    assert "… (3002 more characters)" in page
    listing = admin_client_.get(f"{URL}task/").content.decode()
    assert "y" * 100 not in listing


def test_the_task_page_shows_no_result_before_success_and_a_django_task_s_json(
    admin_client_: Client,
) -> None:
    row = schedule(tasks.add, 1, delay=60)
    page = admin_client_.get(f"{URL}task/{row.pk}/change/").content.decode()
    assert "Result:" in page and "bytes encoded" not in page
    Task.objects.filter(pk=row.pk).update(status=TaskStatus.SUCCEEDED, return_value=[1, "a"])
    page = admin_client_.get(f"{URL}task/{row.pk}/change/").content.decode()
    assert "<pre>[1, &#x27;a&#x27;]</pre>" in page


def test_the_task_list_shows_keys_and_finds_a_task_by_its_key(admin_client_: Client) -> None:
    keyed = schedule(tasks.add, 1, key="reminder:42")
    schedule(tasks.add, 2, key="invoice:7")
    schedule(tasks.add, 3)
    page = admin_client_.get(f"{URL}task/").content.decode()
    assert "reminder:42" in page and "invoice:7" in page and "column-key_and_lock" in page
    found = admin_client_.get(f"{URL}task/", {"q": "reminder:42"}).content.decode()
    assert "reminder:42" in found and "invoice:7" not in found
    assert "1 result" in found
    change = admin_client_.get(f"{URL}task/{keyed.pk}/change/").content.decode()
    assert "reminder:42" in change and "field-key" in change


def test_a_task_s_lock_and_limit_show_read_only_and_the_list_finds_it_by_lock(
    admin_client_: Client,
) -> None:
    from django_htask import schedule
    from tests.integration.testapp import tasks

    made = schedule(tasks.serial, "a")
    schedule(tasks.add, 1)
    page = admin_client_.get(f"{URL}task/{made.pk}/change/")
    admin_form = page.context["adminform"]
    assert {"lock", "max_running"} <= set(admin_form.readonly_fields)
    text = page.content.decode()
    assert "testapp:serial" in text and "Max running" in text
    found = admin_client_.get(f"{URL}task/", {"q": "testapp:serial"})
    assert [t.pk for t in found.context["cl"].result_list] == [made.pk]


def test_a_task_s_snoozes_show_on_its_page_and_in_the_list_and_its_runs_a_click_away(
    admin_client_: Client,
) -> None:
    made = schedule(tasks.restless, "a")  # @task(max_snoozes=1)
    Task.objects.filter(pk=made.pk).update(snoozes=1)
    Run.objects.create(task=made, name="r", function=made.function, status=RunStatus.SNOOZED)
    page = admin_client_.get(f"{URL}task/{made.pk}/change/")
    assert {"snoozes", "max_snoozes"} <= set(page.context["adminform"].readonly_fields)
    text = page.content.decode()
    assert "Max snoozes" in text and "field-snoozes" in text
    runs_link = f'<a href="{URL}run/?task__id__exact={made.pk}">its runs</a>'
    assert runs_link in text
    runs = admin_client_.get(f"{URL}run/", {"task__id__exact": made.pk})
    assert [r.status for r in runs.context["cl"].result_list] == ["snoozed"]
    assert "column-snoozes" in admin_client_.get(f"{URL}task/").content.decode()


@pytest.mark.django_db(transaction=True)
def test_the_task_page_shows_each_attempt_the_success_from_the_task_s_row(
    admin_client_: Client, make_node: Any, fake_clock: FakeClock, calls: Any
) -> None:
    """A task failing twice then succeeding: three attempts on its page, the two failed
    ones linking to their runs with their tracebacks, the success read from its row (it
    wrote no run row), by the node that ran it."""
    from django_htask import RetryPolicy

    node = make_node()
    made = schedule(tasks.flaky, "twice", 2, retry=RetryPolicy(1, kind="fixed", attempts=3))
    for _ in range(3):
        fake_clock.advance(1)
    made.refresh_from_db()
    assert (made.status, made.attempts, made.node) == (TaskStatus.SUCCEEDED, 3, node.node_id)
    failed = list(Run.objects.filter(task=made).order_by("attempt"))
    assert [(r.attempt, r.status) for r in failed] == [(1, "failed"), (2, "failed")]
    page = admin_client_.get(f"{URL}task/{made.pk}/change/").content.decode()
    table = page[page.index('<table class="htask-attempts">') :]
    table = table[: table.index("</table>")]
    rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]  # the header's first
    assert len(rows) == 3
    for run, row in zip(failed, rows, strict=False):
        assert f'href="{URL}run/{run.pk}/change/"' in row
        assert "<td>failed</td>" in row and "Traceback (most recent call last)" in row
        assert f"ConnectionError: twice: call {run.attempt}" in row
    assert "3 (the task's row)" in rows[2] and "<td>succeeded</td>" in rows[2]
    assert f"<td>{node.node_id}</td>" in rows[2] and "<details>" not in rows[2]
    assert f'<a href="{URL}run/?task__id__exact={made.pk}">its runs</a>' in page
    assert "field-node" in page  # the node of its last attempt, on its row


def test_the_task_and_run_lists_count_exactly_up_to_a_bound_then_estimate(
    admin_client_: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table of months of history: no list counts it all (admin/paging.py)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from django_htask.admin import paging

    monkeypatch.setattr(paging, "EXACT", 3)
    for n in range(3):
        schedule(tasks.add, n)
    page = admin_client_.get(f"{URL}task/").content.decode()
    assert "3 tasks" in page
    assert "htask-estimate" not in page
    for n in range(3):
        schedule(tasks.add, n)
    with CaptureQueriesContext(connection) as queries:
        page = admin_client_.get(f"{URL}task/?status__exact=pending").content.decode()
    assert "More than 3 rows: the count is the database's estimate." in page
    counts = [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    assert counts and all("LIMIT 4" in sql for sql in counts), counts  # never all rows
    shown = re.search(r"(\d+) tasks", page)
    assert shown is not None and int(shown.group(1)) >= 4  # an estimate, or the bound
    # The run list, the same; and neither has a date hierarchy (a DISTINCT of every row).
    for n in range(5):
        Run.objects.create(name=f"r{n}", function=ADD, status=RunStatus.SUCCEEDED)
    page = admin_client_.get(f"{URL}run/").content.decode()
    assert "htask-estimate" in page
    assert 'class="xfull"' not in page and "date_hierarchy" not in page


def test_the_queue_filter_offers_the_queues_in_use_without_reading_every_task(
    admin_client_: Client,
) -> None:
    schedule(tasks.add, 1, queue_name="mail")
    done = schedule(tasks.add, 2, queue_name="reports")
    Task.objects.filter(pk=done.pk).update(status=TaskStatus.SUCCEEDED)
    page = admin_client_.get(f"{URL}task/").content.decode()
    assert "?queue_name=mail" in page  # a pending task's queue
    assert "?queue_name=default" in page
    assert "?queue_name=reports" not in page  # only finished tasks have it
    filtered = admin_client_.get(f"{URL}task/?queue_name=reports").content.decode()
    assert "1 task" in filtered and "?queue_name=reports" in filtered  # chosen: offered


# -- what cannot be changed shows no way to change it -----------------------------------
def test_a_code_defined_schedule_cannot_be_deleted_an_orphaned_one_can(
    admin_client_: Client,
) -> None:
    code, orphan, mine = make("code", origin=Origin.CODE), make("orphan"), make("mine")
    Schedule.objects.filter(pk=orphan.pk).update(origin=Origin.CODE, orphaned=True)
    page = admin_client_.get(f"{URL}schedule/{code.pk}/change/").content.decode()
    assert "deletelink" not in page
    assert "cannot be deleted here (the next sync would make it again)" in page
    assert (
        admin_client_.post(f"{URL}schedule/{code.pk}/delete/", {"post": "yes"}).status_code == 403
    )
    assert "deletelink" in admin_client_.get(f"{URL}schedule/{orphan.pk}/change/").content.decode()
    response = admin_client_.post(
        f"{URL}schedule/",
        {
            "action": "delete_selected",
            "_selected_action": [code.pk, orphan.pk, mine.pk],
            "post": "yes",
        },
        follow=True,
    )
    assert "1 schedule(s) defined in the code kept" in response.content.decode()
    assert list(Schedule.objects.values_list("name", flat=True)) == ["code"]


def test_a_task_that_is_not_pending_has_no_save_buttons(
    admin_client_: Client, fake_clock: FakeClock
) -> None:
    pending = schedule(tasks.add, 1, b=2, delay=60)
    done = schedule(tasks.add, 1, b=2)
    Task.objects.filter(pk=done.pk).update(status=TaskStatus.SUCCEEDED)
    page = admin_client_.get(f"{URL}task/{pending.pk}/change/").content.decode()
    assert 'name="_save"' in page and 'name="_continue"' in page  # its time can be moved
    page = admin_client_.get(f"{URL}task/{done.pk}/change/").content.decode()
    assert 'name="_save"' not in page and 'name="_continue"' not in page


def test_the_task_list_shows_the_key_and_the_lock(
    admin_client_: Client, fake_clock: FakeClock
) -> None:
    schedule(tasks.add, 1, b=2, lock="crm-api")
    schedule(tasks.add, 2, b=2)
    schedule(tasks.add, 3, b=2, key="invoice-7", lock="crm-api")
    schedule(tasks.add, 4, b=2, key="invoice-8")
    page = admin_client_.get(f"{URL}task/").content.decode()
    assert sorted(cells(page, "key_and_lock")) == [
        "-",  # the admin's empty value
        "invoice-7 | lock: crm-api",
        "invoice-8",
        "lock: crm-api",
    ]
