"""What a new user trips over in the first hour, run as they run it (``python -m
django …`` or ``python -c`` in a subprocess), and what they read then."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import manage, python

MIGRATE = "run `manage.py migrate`"
NOOP = "tests.acceptance.app.tasks:noop"


# -- forgetting migrate ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "table"),
    [
        (["htask", "list"], "django_htask_schedule"),
        (["htask", "status"], "django_htask_node"),
        (["htask", "health"], "django_htask_node"),
    ],
)
def test_a_command_before_migrate_says_to_run_migrate(
    tmp_path: Path, args: list[str], table: str
) -> None:
    done = manage(tmp_path, "", *args)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"lacks django_htask's table {table}: {MIGRATE}" in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr


def test_runscheduler_before_migrate_says_to_run_migrate(tmp_path: Path) -> None:
    done = manage(tmp_path, "", "runscheduler")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith("CommandError: the database 'sqlite ")
    assert "not applied: 0001_initial, " in done.stderr
    assert done.stderr.rstrip().endswith(MIGRATE)


def test_schedule_before_migrate_raises_not_migrated(tmp_path: Path) -> None:
    code = (
        "import django; django.setup()\n"
        "from django_htask import schedule\n"
        "from django_htask.exceptions import NotMigrated\n"
        "try:\n"
        f"    schedule({NOOP!r}, 'hello')\n"
        "except NotMigrated as exc:\n"
        "    print(exc)\n"
    )
    done = python(tmp_path, "", "-c", code)
    assert done.returncode == 0, done.stderr
    database = tmp_path / "db.sqlite3"
    assert done.stdout == (
        f"the database 'sqlite {database}' lacks django_htask's table django_htask_task: "
        f"{MIGRATE}\n"
    )


# -- a typo in @periodic ---------------------------------------------------------------------
TYPO_APP = 'INSTALLED_APPS = [*INSTALLED_APPS, "typo_app"]'


def typo_app(tmp_path: Path) -> Path:
    """An installed app whose tasks module declares ``@periodic("@evry 10s")``."""
    app = tmp_path / "typo_app"
    app.mkdir()
    (app / "__init__.py").write_text("")
    tasks = app / "tasks.py"
    tasks.write_text(
        "from django_htask import periodic\n\n\n"
        '@periodic("@evry 10s")\n'
        "def ping() -> None:\n"
        "    pass\n"
    )
    return tasks


@pytest.mark.parametrize("command", ["check", "runscheduler"])
def test_a_typo_in_periodic_is_a_check_error_naming_the_place(tmp_path: Path, command: str) -> None:
    tasks = typo_app(tmp_path)
    done = manage(tmp_path, TYPO_APP, command)
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        f"typo_app.tasks.ping: (django_htask.E008) @periodic('@evry 10s') at {tasks}:4: "
        "InvalidSchedule: unknown descriptor '@evry': did you mean '@every'? (known: @every, "
    ) in done.stderr
    assert "Traceback" not in done.stderr
    assert "stop:" not in done.stdout  # no node started


def test_runscheduler_skipping_the_checks_still_refuses_to_sync_a_typo(tmp_path: Path) -> None:
    tasks = typo_app(tmp_path)
    assert manage(tmp_path, TYPO_APP, "migrate", "--skip-checks", "-v", "0").returncode == 0
    done = manage(tmp_path, TYPO_APP, "runscheduler", "--skip-checks")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.endswith(
        "CommandError: 1 @periodic declaration(s) cannot be read, nothing synced: "
        f"typo_app.tasks.ping: @periodic('@evry 10s') at {tasks}:4: InvalidSchedule: "
        "unknown descriptor '@evry': did you mean '@every'? (known: @every, @once, @solar, "
        "@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly)\n"
    )


def test_a_typo_in_periodic_leaves_the_site_starting(tmp_path: Path) -> None:
    typo_app(tmp_path)
    done = manage(tmp_path, TYPO_APP, "shell", "-c", "print('started')")
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("started\n")


# -- django_htask missing from INSTALLED_APPS ------------------------------------------------
NOT_INSTALLED = (
    'INSTALLED_APPS = [a for a in INSTALLED_APPS if a != "django_htask"] + ["shop"]\n'
    "TASKS = {}"  # on Django 6 the backend's check would import django_htask too
)
ADD_THE_APP = (
    "django.core.exceptions.ImproperlyConfigured: django_htask is imported but is not in "
    "INSTALLED_APPS: add 'django_htask' to INSTALLED_APPS (then run `manage.py migrate`)\n"
)


@pytest.mark.parametrize(
    "args",
    [
        ["-c", "import django; django.setup(); from django_htask import periodic"],
        ["-m", "django", "check"],  # the app's models import django_htask's
    ],
)
def test_without_the_app_installed_importing_it_says_to_add_it(
    tmp_path: Path, args: list[str]
) -> None:
    shop = tmp_path / "shop"
    shop.mkdir()
    (shop / "__init__.py").write_text("")
    (shop / "models.py").write_text("from django_htask.models import Task  # noqa: F401\n")
    done = python(tmp_path, NOT_INSTALLED, *args)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.endswith(ADD_THE_APP), done.stderr
