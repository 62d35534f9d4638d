"""The process pool's settings and the errors it gives before it starts anything
(its work: tests/acceptance/test_process_pool.py, tests/acceptance/test_stopping.py,
tests/cluster/test_faults.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from django_htask.conf import get_settings
from django_htask.engine import SystemClock
from django_htask.node import Node
from django_htask.node.processes import ProcessPool, describe_exit


@pytest.mark.parametrize(
    ("htask", "message"),
    [
        ({"POOL": "fork"}, "HTASK['POOL'] must be one of 'thread', 'process', got 'fork'"),
        ({"MAX_TASKS_PER_CHILD": -1}, "HTASK['MAX_TASKS_PER_CHILD'] must be an int >= 0, got -1"),
        (
            {"MAX_MEMORY_PER_CHILD": 1.5},
            "HTASK['MAX_MEMORY_PER_CHILD'] must be an int >= 0, got 1.5",
        ),
    ],
)
def test_bad_pool_settings_are_named(settings: Any, htask: dict[str, Any], message: str) -> None:
    settings.HTASK = htask
    with pytest.raises(ImproperlyConfigured) as raised:
        get_settings()
    assert str(raised.value) == message


def test_the_settings_choose_the_process_pool(settings: Any) -> None:
    settings.HTASK = {"POOL": "process", "MAX_TASKS_PER_CHILD": 100, "WORKERS": 2}
    node = Node(node_id="pool-node")
    assert node.processes is not None
    assert (node.processes.size, node.processes.max_tasks) == (2, 100)
    assert Node(node_id="thread-node", pool="thread").processes is None


def test_a_node_refuses_a_pool_it_does_not_know_and_a_process_pool_without_workers() -> None:
    with pytest.raises(ValueError, match="pool must be one of thread, process, got 'fork'"):
        Node(pool="fork")
    with pytest.raises(ImproperlyConfigured, match=r"workers >= 1, got 0 \(0, a thread per job"):
        Node(pool="process", workers=0)


def test_worker_processes_need_the_settings_module_in_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DJANGO_SETTINGS_MODULE")
    with pytest.raises(ImproperlyConfigured, match="needs DJANGO_SETTINGS_MODULE"):
        ProcessPool("n", SystemClock(), 1).start()


def test_worker_processes_cannot_share_an_in_memory_sqlite_database(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The tests' own database is a file (its TEST NAME); an in-memory one is refused.
    connection = connections["default"]
    if connection.vendor != "sqlite":
        pytest.skip("about SQLite; the PostgreSQL pass runs the database-free tests once")
    monkeypatch.setitem(connection.settings_dict, "NAME", ":memory:")
    with pytest.raises(ImproperlyConfigured) as raised:
        ProcessPool("n", SystemClock(), 1).start()
    assert str(raised.value) == (
        "the process pool cannot share the in-memory SQLite database 'default' with its "
        "worker processes: use a database file"
    )


def test_a_worker_process_that_cannot_set_django_up_stops_the_start_with_its_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if connections["default"].vendor == "sqlite":
        monkeypatch.setitem(connections["default"].settings_dict, "NAME", str(tmp_path / "db"))
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "tests.no_such_settings")
    with pytest.raises(ImproperlyConfigured) as raised:
        ProcessPool("n", SystemClock(), 2).start()
    message = str(raised.value)
    assert message.startswith("the process pool could not start its worker processes: ")
    assert "No module named 'tests.no_such_settings'" in message


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (-9, "killed by signal 9 (SIGKILL)"),
        (1, "exit status 1"),
        (None, "still running"),
        (-99, "killed by signal 99"),
    ],
)
def test_an_exit_is_described(code: int | None, words: str) -> None:
    assert describe_exit(code) == words
