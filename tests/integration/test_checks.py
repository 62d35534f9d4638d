"""System checks: django_htask.E001 … W004 (E005 is the backend's, see test_backend)."""

from __future__ import annotations

import pytest
from django.core import checks
from django.db import connection
from django.test import override_settings

from django_htask.engine import FakeClock
from django_htask.models import Schedule, Task
from tests.integration.node_rows import node_row

pytestmark = pytest.mark.django_db


def ids(databases: list[str] | None = None) -> list[str]:
    found = checks.run_checks(databases=databases, include_deployment_checks=False)
    return [m.id for m in found if m.id and m.id.startswith("django_htask.")]


def messages(databases: list[str] | None = None) -> dict[str, str]:
    found = checks.run_checks(databases=databases)
    return {m.id: m.msg for m in found if m.id and m.id.startswith("django_htask.")}


def test_a_correct_project_passes() -> None:
    assert ids(["default"]) == []


def test_use_tz_false_is_an_error() -> None:
    with override_settings(USE_TZ=False):
        assert "django_htask.E001" in ids()


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ({"WORKERS": "4"}, "'WORKERS'"),
        ({"POLL_INTERVAL": -1}, "'POLL_INTERVAL'"),
        ({"NO_SUCH_KEY": 1}, "'NO_SUCH_KEY'"),
        ([1, 2], "[1, 2]"),
    ],
)
def test_a_wrong_setting_is_an_error_naming_it(value: object, named: str) -> None:
    with override_settings(HTASK=value):
        found = messages()
    assert named in found["django_htask.E002"]


def test_rows_naming_unregistered_functions_warn_with_their_names() -> None:
    Schedule.objects.bulk_create(
        [Schedule(name="ghost", function="gone.module:job", schedule="@daily")]
    )
    Task.objects.bulk_create(
        [Task(function="gone.module:other", run_at="2030-01-01T00:00Z", payload=b"")]
    )
    assert ids() == []  # reading rows is a database check
    found = messages(["default"])
    assert "'gone.module:job'" in found["django_htask.W003"]
    assert "'gone.module:other'" in found["django_htask.W003"]


@pytest.mark.skipif(
    connection.vendor != "sqlite",
    reason="W004 is about SQLite; the PostgreSQL pass checks it stays quiet",
)
def test_several_live_nodes_on_sqlite_warn(fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    node_row("a", now)
    assert "django_htask.W004" not in ids(["default"])
    node_row("b", now)
    node_row("dead", now, silent_for=3600)
    found = messages(["default"])
    assert "2 live scheduler nodes" in found["django_htask.W004"]
    assert "dead" not in found["django_htask.W004"]


@pytest.mark.skipif(connection.vendor == "sqlite", reason="the SQLite pass checks the warning")
def test_several_live_nodes_on_postgresql_are_fine(fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    node_row("a", now)
    node_row("b", now)
    assert "django_htask.W004" not in ids(["default"])
