"""``runscheduler`` run from inside a program (a test, a script) returns: only the
process's own command line ends the process at once after a clean stop."""

from __future__ import annotations

import pytest
from django.core.management import execute_from_command_line
from django.db import connection


@pytest.mark.django_db(transaction=True)
def test_execute_from_command_line_inside_a_program_returns(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # tests/conftest.py makes os._exit an error in the test process.
    execute_from_command_line(["manage.py", "runscheduler", "--batch", "--no-sync"])
    assert "nothing is due any more (--batch)" in capsys.readouterr().out


@pytest.mark.django_db(transaction=True)
def test_the_banner_names_the_database_and_no_limit_on_nodes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """SQLite's one node is said by a system check (W004); PostgreSQL, MySQL and
    MariaDB take several nodes: the banner has nothing to add."""
    execute_from_command_line(["manage.py", "runscheduler", "--batch", "--no-sync"])
    out = capsys.readouterr().out
    assert f"  database:  {connection.vendor} " in out
    assert "nodes:" not in out


@pytest.mark.skipif(connection.vendor != "mysql", reason="MySQL/MariaDB's isolation level")
@pytest.mark.django_db(transaction=True)
def test_runscheduler_refuses_to_start_on_mysql_unless_it_reads_committed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    try:
        with pytest.raises(SystemExit):  # a CommandError, said on stderr
            execute_from_command_line(["manage.py", "runscheduler", "--batch", "--no-sync"])
        err = capsys.readouterr().err
        assert "runs transactions at REPEATABLE-READ: django-htask needs READ COMMITTED" in err
        assert "DATABASES['default']['OPTIONS']['isolation_level']" in err
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")


class _Collector:
    """Stands in for the ``gc`` module in :mod:`django_htask.apps`: records what is asked
    of it, so that the test process's own collector is left as it is."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.calls: list[str] = []

    def isenabled(self) -> bool:
        return self.enabled

    def disable(self) -> None:
        self.enabled = False
        self.calls.append("disable")

    def enable(self) -> None:
        self.enabled = True
        self.calls.append("enable")

    def freeze(self) -> None:
        self.calls.append("freeze")


@pytest.mark.parametrize(
    ("argv", "enabled", "held"),
    [
        (["manage.py", "runscheduler", "--workers", "4"], True, True),
        (["manage.py", "runserver"], True, False),
        (["manage.py", "check", "runscheduler"], True, False),
        (["gunicorn", "project.wsgi"], True, False),
        (["manage.py"], True, False),
        # The project turned it off itself: it stays off.
        (["manage.py", "runscheduler"], False, False),
    ],
)
def test_only_a_runscheduler_process_holds_the_collector_while_django_sets_up(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], enabled: bool, held: bool
) -> None:
    from django_htask import apps

    collector = _Collector(enabled)
    monkeypatch.setattr(apps, "gc", collector)
    monkeypatch.setitem(apps._collector, "held", False)
    apps._hold_collector(argv)
    assert collector.calls == (["disable"] if held else [])
    apps._release_collector()
    apps._release_collector()  # once only
    # What the set-up made frozen before the collector is on again.
    assert collector.calls == (["disable", "freeze", "enable"] if held else [])
    assert collector.enabled is enabled
