"""Models: version trigger, next_run_at upkeep, validation on save, settings, admin."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import connection
from django.test import Client

from django_htask.conf import HtaskSettings, get_settings, load
from django_htask.engine import ArgumentError, FakeClock, FunctionNotRegistered, InvalidSchedule
from django_htask.models import Node, Run, Schedule, Task, new_token

ADD = "tests.integration.testapp.tasks:add"


def make_schedule(name: str = "s1", text: str = "@every 1m", **kwargs: object) -> Schedule:
    schedule = Schedule(name=name, function=ADD, schedule=text, **kwargs)
    schedule.set_call((1,), {"b": 2})
    schedule.save()
    return schedule


def version(pk: int) -> int:
    return Schedule.objects.values_list("version", flat=True).get(pk=pk)


@pytest.mark.django_db
def test_version_is_set_on_insert_and_bumped_by_save_update_and_raw_sql(
    fake_clock: FakeClock,
) -> None:
    a = make_schedule("a")
    b = make_schedule("b")
    assert 0 < a.version < b.version
    assert a.version == version(a.pk)
    a.enabled = False
    a.save()
    v1 = version(a.pk)
    assert v1 > b.version
    Schedule.objects.filter(pk=a.pk).update(grace=5.0)
    v2 = version(a.pk)
    assert v2 > v1
    with connection.cursor() as cursor:
        cursor.execute("UPDATE django_htask_schedule SET grace = 7 WHERE id = %s", [a.pk])
    v3 = version(a.pk)
    assert v3 > v2
    # One counter for the whole table: a multi-row update gives distinct versions.
    Schedule.objects.update(grace=1.0)
    versions = sorted(Schedule.objects.values_list("version", flat=True))
    assert versions[0] > v3
    assert len(set(versions)) == 2


@pytest.mark.django_db
def test_versions_keep_growing_after_the_newest_row_is_deleted(fake_clock: FakeClock) -> None:
    a = make_schedule("a")
    b = make_schedule("b")
    b.delete()
    a.grace = 3.0
    a.save()
    assert a.version > b.version


@pytest.mark.django_db
def test_next_run_at_is_computed_on_save_and_recomputed_when_timing_changes(
    fake_clock: FakeClock,
) -> None:
    s = make_schedule(text="@every 1m")
    assert s.next_run_at == fake_clock.now() + timedelta(minutes=1)
    fake_clock.advance(10)
    s.grace = 30.0
    s.save()  # not a timing change: kept
    assert s.next_run_at == fake_clock.now() + timedelta(seconds=50)
    s.schedule = "@every 5m"
    s.save()
    assert s.next_run_at == fake_clock.now() + timedelta(minutes=5)
    s.enabled = False
    s.save()
    assert s.next_run_at is None
    s.enabled = True
    s.save(update_fields=["enabled"])
    s.refresh_from_db()
    assert s.next_run_at == fake_clock.now() + timedelta(minutes=5)


@pytest.mark.django_db
def test_save_checks_the_call_and_the_schedule(fake_clock: FakeClock) -> None:
    s = Schedule(name="x", function=ADD, schedule="@every 1m")
    with pytest.raises(ArgumentError):
        s.set_call(("not an int",))
    with pytest.raises(ArgumentError):
        s.save()  # add() needs a
    s.function = "nowhere:missing"
    with pytest.raises(FunctionNotRegistered, match="nowhere:missing"):
        s.save()
    s = Schedule(name="y", function="tests.integration.testapp.tasks:renamed")
    s.function = "custom.name"
    s.schedule = "every blue moon"
    with pytest.raises(InvalidSchedule, match="every blue moon"):
        s.save()
    assert not Schedule.objects.exists()


@pytest.mark.django_db
def test_a_schedule_whose_function_is_gone_can_be_disabled(fake_clock: FakeClock) -> None:
    s = Schedule.objects.create(name="gone", function=ADD, schedule="@every 1m", enabled=False)
    Schedule.objects.filter(pk=s.pk).update(function="removed.module:job")
    s.refresh_from_db()
    s.save()  # disabled: saved without looking the function up
    s.enabled = True
    with pytest.raises(FunctionNotRegistered, match=r"removed\.module:job"):
        s.save()
    s.refresh_from_db()
    assert not s.enabled


@pytest.mark.django_db
def test_clean_reports_each_bad_field(fake_clock: FakeClock) -> None:
    s = Schedule(name="z", function="nowhere:missing", schedule="nonsense")
    with pytest.raises(ValidationError) as info:
        s.full_clean()
    assert {"schedule", "function"} <= set(info.value.message_dict)


@pytest.mark.django_db
def test_the_stored_call_round_trips(fake_clock: FakeClock) -> None:
    s = make_schedule()
    s.refresh_from_db()
    assert s.call == ((1,), {"b": 2})


def test_task_tokens_are_long_random_and_url_safe() -> None:
    tokens = {new_token() for _ in range(1000)}
    assert len(tokens) == 1000
    for token in tokens:
        assert len(token) >= 22  # >= 128 bits in base64
        assert token.replace("-", "").replace("_", "").isalnum()


def test_settings_defaults_and_checks() -> None:
    assert load(None) == HtaskSettings()
    assert load({"WORKERS": 8, "POLL_INTERVAL": 2}).poll_interval == 2.0
    with pytest.raises(ImproperlyConfigured, match="WORKRES"):
        load({"WORKRES": 8})
    with pytest.raises(ImproperlyConfigured, match="'many'"):
        load({"WORKERS": "many"})
    with pytest.raises(ImproperlyConfigured, match="POLL_INTERVAL"):
        load({"POLL_INTERVAL": 0})
    with pytest.raises(ImproperlyConfigured, match="must be a dict"):
        load(["WORKERS"])


def test_settings_follow_override_settings(settings: object) -> None:
    settings.HTASK = {"WORKERS": 13}  # type: ignore[attr-defined]
    assert get_settings().workers == 13


def test_a_change_of_the_settings_while_a_thread_loads_them_is_not_undone(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread that read the settings before they changed (a node's thread asks at
    each query, through the router) must not cache them after the change's reset."""
    from django_htask import conf

    loading, release = threading.Event(), threading.Event()

    def slow_load(value: object) -> HtaskSettings:
        loaded = load(value)  # what the thread read: the settings before the change
        loading.set()
        release.wait(5)
        return loaded

    settings.HTASK = {"WORKERS": 3}
    monkeypatch.setattr(conf, "load", slow_load)
    reader = threading.Thread(target=get_settings)
    reader.start()
    assert loading.wait(5)
    changer = threading.Thread(target=setattr, args=(settings, "HTASK", {"WORKERS": 13}))
    changer.start()
    changer.join(0.2)  # its reset waits for the load under way
    release.set()
    reader.join(5)
    changer.join(5)
    monkeypatch.setattr(conf, "load", load)
    assert get_settings().workers == 13


@pytest.mark.django_db
def test_every_model_has_an_admin_page(fake_clock: FakeClock) -> None:
    get_user_model().objects.create_superuser("admin", "a@example.com", "pw")
    make_schedule()
    Task.objects.create(function=ADD, run_at=fake_clock.now())
    client = Client()
    client.login(username="admin", password="pw")
    for model in (Schedule, Task, Run, Node):
        url = f"/admin/django_htask/{model._meta.model_name}/"
        assert client.get(url).status_code == 200, url
