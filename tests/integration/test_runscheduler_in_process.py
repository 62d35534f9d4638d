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
def test_the_banner_says_when_the_database_takes_one_node_for_now(
    capsys: pytest.CaptureFixture[str],
) -> None:
    execute_from_command_line(["manage.py", "runscheduler", "--batch", "--no-sync"])
    out = capsys.readouterr().out
    if connection.vendor == "mysql":
        assert "  nodes:     one node on MySQL/MariaDB for now" in out
    else:  # SQLite says it in a system check (W004), PostgreSQL takes several
        assert "nodes:" not in out
