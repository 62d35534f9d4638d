"""System checks: django_htask.E001 … W007 (E005 is the backend's, see test_backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core import checks
from django.db import connection
from django.test import override_settings

from django_htask import checks as htask_checks
from django_htask import periodic
from django_htask.engine import FakeClock
from django_htask.models import Schedule, Task
from tests.acceptance.conftest import manage
from tests.integration.node_rows import node_row

pytestmark = pytest.mark.django_db


def ids(databases: list[str] | None = None) -> list[str]:
    found = checks.run_checks(databases=databases, include_deployment_checks=False)
    return [
        m.id for m in found if m.id and m.id.startswith("django_htask.") and not m.is_silenced()
    ]


def messages(databases: list[str] | None = None) -> dict[str, str]:
    found = checks.run_checks(databases=databases)
    return {
        m.id: m.msg
        for m in found
        if m.id and m.id.startswith("django_htask.") and not m.is_silenced()
    }


def test_a_correct_project_passes() -> None:
    assert ids(["default"]) == []


def test_use_tz_false_is_an_error() -> None:
    with override_settings(USE_TZ=False):
        found = [m for m in checks.run_checks() if m.id == "django_htask.E001"]
    [error] = found
    assert "naive time names one instant twice or none" in error.msg
    assert error.hint is not None and error.hint.startswith("set USE_TZ = True")


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ({"WORKERS": "4"}, "'WORKERS'"),
        ({"POLL_INTERVAL": -1}, "'POLL_INTERVAL'"),
        ({"NO_SUCH_KEY": 1}, "'NO_SUCH_KEY'"),
        ({"DJANGO_TASK_MODULES": "myapp.jobs"}, "'DJANGO_TASK_MODULES'"),
        ({"DJANGO_TASK_MODULES": ["myapp/jobs"]}, "['myapp/jobs']"),
        ([1, 2], "[1, 2]"),
    ],
)
def test_a_wrong_setting_is_an_error_naming_it(value: object, named: str) -> None:
    with override_settings(HTASK=value):
        found = messages()
    assert named in found["django_htask.E002"]


def typo() -> None: ...


@pytest.mark.usefixtures("declared")
def test_a_periodic_declaration_that_cannot_be_read_is_an_error_naming_it() -> None:
    periodic("@evry 10s")(typo)
    found = [m for m in checks.run_checks() if m.id == "django_htask.E008"]
    assert [(m.level, m.obj) for m in found] == [(checks.ERROR, f"{__name__}.typo")]
    line = typo.__code__.co_firstlineno
    assert found[0].msg == (
        f"@periodic('@evry 10s') at {__file__}:{line}: InvalidSchedule: unknown descriptor "
        "'@evry': did you mean '@every'? (known: @every, @once, @solar, @yearly, @annually, "
        "@monthly, @weekly, @daily, @midnight, @hourly)"
    )
    assert "runscheduler does not start" in (found[0].hint or "")


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
    reason="W004 is about SQLite; the PostgreSQL and MariaDB passes check it stays quiet",
)
def test_several_live_nodes_on_a_one_node_database_warn(fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    node_row("a", now)
    assert "django_htask.W004" not in ids(["default"])
    node_row("b", now)
    node_row("dead", now, silent_for=3600)
    found = messages(["default"])
    assert "2 live scheduler nodes" in found["django_htask.W004"]
    assert "dead" not in found["django_htask.W004"]
    assert "share the SQLite database 'default'" in found["django_htask.W004"]


@pytest.mark.skipif(connection.vendor == "sqlite", reason="the SQLite pass checks the warning")
def test_several_live_nodes_on_postgresql_mysql_or_mariadb_are_fine(fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    node_row("a", now)
    node_row("b", now)
    assert "django_htask.W004" not in ids(["default"])


def _sqlite(name: str, **options: Any) -> dict[str, Any]:
    return {"ENGINE": "django.db.backends.sqlite3", "NAME": name, "OPTIONS": options}


@pytest.mark.parametrize(
    ("databases", "warned"),
    [
        ({"default": _sqlite("site.db", timeout=20)}, ["default"]),
        ({"default": _sqlite("site.db", transaction_mode="IMMEDIATE")}, []),
        ({"default": _sqlite("site.db", transaction_mode="immediate")}, []),
        ({"default": _sqlite("site.db", transaction_mode="DEFERRED")}, ["default"]),
        # Another alias of the same file writes beside the node too; another file does not.
        (
            {
                "default": _sqlite("site.db", transaction_mode="IMMEDIATE"),
                "replica": _sqlite("site.db"),
                "cache": _sqlite("other.db"),
            },
            ["replica"],
        ),
        ({"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "site"}}, []),
    ],
)
def test_sqlite_without_immediate_transactions_warns_naming_the_alias(
    databases: dict[str, Any], warned: list[str]
) -> None:
    found = htask_checks.sqlite_deferred("default", databases)
    assert [m.obj for m in found] == [f"settings.DATABASES[{alias!r}]" for alias in warned]
    assert all(m.id == "django_htask.W011" for m in found)
    for message in found:
        assert "fails at once with 'database is locked'" in message.msg
        assert '"transaction_mode": "IMMEDIATE"' in (message.hint or "")


@pytest.mark.skipif(connection.vendor != "sqlite", reason="the SQLite pass checks it")
def test_the_suites_own_sqlite_is_warned_of_and_silenced_by_its_settings() -> None:
    [found] = [m for m in checks.run_checks() if m.id == "django_htask.W011"]
    assert found.obj == "settings.DATABASES['default']"
    assert found.is_silenced()


def test_the_models_conditions_dropped_by_mysql_raise_no_warning() -> None:
    """MySQL and MariaDB ignore the conditions of indexes and unique constraints, which
    django-htask's models are written for: Django's warnings of it (models.W036,
    models.W037) would show at every command. Elsewhere they never arise; the
    MariaDB pass checks them."""
    found = checks.run_checks(databases=["default"])
    ours = [m for m in found if m.id in ("models.W036", "models.W037")]
    assert ours == []


# -- no check ever raises ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("settings", "shown"),
    [
        ("USE_TZ = False", ["django_htask.E001"]),
        (
            "USE_TZ = False\nHTASK = {'NODE_TIMEOUT': 'a minute'}",
            ["django_htask.E001", "django_htask.E002", "'NODE_TIMEOUT'"],
        ),
    ],
)
def test_migrate_with_bad_settings_shows_the_errors_without_a_traceback(
    tmp_path: Path, settings: str, shown: list[str]
) -> None:
    done = manage(tmp_path, settings, "migrate", "--no-input")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "SystemCheckError" in done.stderr
    for text in shown:
        assert text in done.stderr
    assert "Traceback" not in done.stderr
    assert "django_htask.W007" not in done.stderr  # foreseen, not caught by the safety net


def test_check_on_a_database_without_tables_is_quiet(tmp_path: Path) -> None:
    done = manage(tmp_path, "", "check", "--database", "default")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"USE_TZ": False}, ["django_htask.E001"]),
        ({"HTASK": {"NODE_TIMEOUT": -1}}, ["django_htask.E002"]),
        ({"HTASK": "fast"}, ["django_htask.E002"]),
        ({"USE_TZ": False, "HTASK": [1]}, ["django_htask.E001", "django_htask.E002"]),
    ],
)
def test_the_database_checks_never_raise_whatever_the_settings(
    fake_clock: FakeClock, overrides: dict[str, Any], expected: list[str]
) -> None:
    node_row("a", fake_clock.now())
    with override_settings(**overrides):
        assert sorted(ids(["default"])) == expected


def test_a_check_that_fails_unforeseen_is_warning_w007_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(databases: object) -> list[str]:
        raise RuntimeError("router exploded")

    monkeypatch.setattr(htask_checks, "_aliases", broken)
    found = [m for m in checks.run_checks(databases=["default"]) if m.id == "django_htask.W007"]
    assert sorted(m.msg for m in found) == [
        "the check check_database_rows could not run: RuntimeError: router exploded",
        "the check check_sqlite_nodes could not run: RuntimeError: router exploded",
    ]
