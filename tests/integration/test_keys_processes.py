"""The acceptance figure of keys (issue 25): 200 concurrent ``schedule(key=K)`` calls
from 8 processes (real OS processes) leave exactly one pending task with the key; with
``on_conflict="replace"`` it holds the arguments of the call that committed last, with
``"ignore"`` those of the call that committed first (the order of the commits is the
database's: see tests/integration/keyed_calls.py). Run on SQLite and on PostgreSQL (in
the PostgreSQL pass)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from django_htask.models import Task, TaskStatus
from tests.integration.keyed_calls import COUNTER, PHASES

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 8
CALLS = 25  # each, per phase: 200 a phase


@pytest.fixture
def counter() -> Iterator[None]:
    """The table where each call counts its commit (one row per phase)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE {COUNTER} (id integer PRIMARY KEY, n integer NOT NULL, "
            "last integer, first integer)"
        )
        for _key, _mode, row in PHASES:
            cursor.execute(f"INSERT INTO {COUNTER} (id, n) VALUES (%s, 0)", [row])
    yield
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {COUNTER}")


@pytest.fixture
def callers() -> Iterator[list[subprocess.Popen[str]]]:
    """The processes, each set up and connected to the test database."""
    database = str(connection.settings_dict["NAME"])
    command = [sys.executable, "-m", "tests.integration.keyed_calls", database]
    started = [
        subprocess.Popen(
            [*command, str(n), str(CALLS)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(PROCESSES)
    ]
    try:
        yield started
    finally:
        for p in started:
            if p.poll() is None:
                p.kill()
            p.wait(30)
            for pipe in (p.stdin, p.stdout):
                if pipe is not None:
                    pipe.close()


def answer(p: subprocess.Popen[str]) -> str:
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line, f"a caller ended (exit status {p.wait(30)})"
    return line


@pytest.mark.django_db(transaction=True)
def test_concurrent_schedules_of_one_key_leave_one_pending_task(
    counter: None, callers: list[subprocess.Popen[str]]
) -> None:
    assert [answer(p) for p in callers] == ["ready\n"] * PROCESSES
    took = []
    for phase, (key, on_conflict, row) in enumerate(PHASES):
        began = time.monotonic()
        for p in callers:  # all at once: none waits for another to start
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        tokens = [token for p in callers for token in json.loads(answer(p))]
        took.append(time.monotonic() - began)
        [task] = Task.objects.filter(key=key, status=TaskStatus.PENDING)
        assert Task.objects.filter(key=key).count() == 1
        assert len(tokens) == PROCESSES * CALLS
        assert set(tokens) == {task.token}, phase  # every caller got the one task
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT n, first, last FROM {COUNTER} WHERE id = %s", [row])
            n, first, last = cursor.fetchone()
        assert n == PROCESSES * CALLS
        winner = last if on_conflict == "replace" else first
        assert task.call == ((winner,), {}), on_conflict
    assert [p.wait(30) for p in callers] == [0] * PROCESSES
    print(f"{PROCESSES} processes, {PROCESSES * CALLS} calls a phase: ", end="")
    print(", ".join(f"{o} {s:.1f} s" for (_k, o, _r), s in zip(PHASES, took, strict=True)))
