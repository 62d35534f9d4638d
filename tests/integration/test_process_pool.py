"""The process pool's settings and the errors it gives before it starts anything
(its work: tests/acceptance/test_process_pool.py, tests/acceptance/test_stopping.py,
tests/cluster/test_faults.py)."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from django_htask.conf import get_settings
from django_htask.engine import RunGuard, SystemClock, decode_result, registry
from django_htask.node import Node
from django_htask.node.execution import Call
from django_htask.node.processes import ProcessPool, describe_exit
from django_htask.store import RunOutcome


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


# -- a pool of one worker process, driven as a node's worker thread drives it -------------
NAP = "tests.integration.testapp.tasks:nap"
ECHO = "tests.integration.testapp.tasks:echo"
ENVIRON = "tests.integration.testapp.tasks:environ"


def call_of(function: str, *args: Any) -> Call:
    return Call(registry.check_call(function, args, {}), function, function, "n", 1, None)


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ProcessPool]:
    """One worker process; its database a file (the calls here do not use it)."""
    if connections["default"].vendor == "sqlite":
        monkeypatch.setitem(connections["default"].settings_dict, "NAME", str(tmp_path / "db"))
    started = ProcessPool("n", SystemClock(), 1)
    started.start()
    yield started
    started.close()


def napping(pool: ProcessPool, key: Any, guard: RunGuard, tmp_path: Path) -> list[RunOutcome]:
    """A call of ``nap(60)`` on a thread of its own (as a worker makes it), once the
    worker process is in it."""
    started = tmp_path / "started"
    call = call_of(NAP, 60, str(started))
    got: list[RunOutcome] = []
    threading.Thread(target=lambda: got.append(pool.execute(key, call, guard))).start()
    deadline = time.monotonic() + 10
    while not started.exists():
        assert time.monotonic() < deadline, "the call never began"
        time.sleep(0.01)
    return got


def wait_for(got: list[RunOutcome]) -> RunOutcome:
    deadline = time.monotonic() + 10
    while not got:
        assert time.monotonic() < deadline, "no outcome"
        time.sleep(0.01)
    return got[0]


def test_a_call_is_made_in_the_worker_process_and_the_process_is_reused(
    pool: ProcessPool,
) -> None:
    first = pool.execute(("task", 1), call_of(NAP, 0), RunGuard())
    second = pool.execute(("task", 2), call_of(NAP, 0), RunGuard())
    assert (first.status, second.status) == ("succeeded", "succeeded")
    assert (first.task_id, first.function, first.node) == (None, NAP, "n")
    assert (pool.started, pool.died, pool.recycled) == (1, 0, 0)


def test_a_worker_process_is_named_with_its_node_and_a_short_command_line(
    pool: ProcessPool,
) -> None:
    """``ps`` shows ``python -m django_htask.node.child <node> <fd> <fd>``, ``top`` and
    ``ps -o comm`` ``htask-worker``: a short line that names its node."""
    [child] = pool._idle
    argv = Path(f"/proc/{child.pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    assert argv[:4] == [sys.executable, "-m", "django_htask.node.child", "n"], argv
    assert len(" ".join(argv)) < len(sys.executable) + 60
    assert Path(f"/proc/{child.pid}/comm").read_text().strip() == "htask-worker"


def test_a_worker_process_has_the_nodes_path_and_its_own_pythonpath(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The path the child imports from is the node's, exactly; the PYTHONPATH the
    node was started with is the child's again (for what a task starts)."""
    if connections["default"].vendor == "sqlite":
        monkeypatch.setitem(connections["default"].settings_dict, "NAME", str(tmp_path / "db"))
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.syspath_prepend(str(tmp_path))  # only the node has it
    started = ProcessPool("n", SystemClock(), 1)
    started.start()
    try:
        call = dataclasses.replace(call_of(ENVIRON), task_id=1)
        outcome = started.execute(("task", 1), call, RunGuard())
    finally:
        started.close()
    assert outcome.status == "succeeded", outcome.error
    path, pythonpath = decode_result(outcome.result)
    assert path == sys.path
    assert pythonpath == "/elsewhere"


def test_a_task_s_result_is_encoded_in_its_worker_process_and_comes_back(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if connections["default"].vendor == "sqlite":
        monkeypatch.setitem(connections["default"].settings_dict, "NAME", str(tmp_path / "db"))
    small = ProcessPool("n", SystemClock(), 1, max_result=50)
    small.start()
    try:
        call = dataclasses.replace(call_of(NAP, 0), task_id=1)
        outcome = small.execute(("task", 1), call, RunGuard())
        assert outcome.status == "succeeded" and outcome.result is not None
        assert decode_result(outcome.result) == small._idle[0].pid != os.getpid()
        big = dataclasses.replace(call_of(ECHO, "x" * 100), task_id=2)
        failed = small.execute(("task", 2), big, RunGuard())
        assert (failed.status, failed.result, failed.extra) == (
            "failed",
            None,
            {"retryable": False},
        )
        assert failed.error.startswith(
            "ResultNotStored: the result (str) is 102 bytes encoded, over the limit of 50 "
        )
        assert small.died == 0
    finally:
        small.close()


def test_a_function_the_worker_process_does_not_know_fails_its_run_only(
    pool: ProcessPool,
) -> None:
    call = Call(b"", "tests.nowhere:gone", "gone", "n", 1, None)
    outcome = pool.execute(("task", 1), call, RunGuard())
    assert outcome.status == "failed"
    assert outcome.error.startswith("FunctionNotRegistered: ")
    assert outcome.extra == {"retryable": False}
    assert pool.execute(("task", 2), call_of(NAP, 0), RunGuard()).status == "succeeded"
    assert pool.died == 0


def test_a_sleeping_call_is_stopped_by_the_forced_stop_signal(
    pool: ProcessPool, tmp_path: Path
) -> None:
    guard = RunGuard()
    got = napping(pool, ("task", 1), guard, tmp_path)
    assert guard.stop("TimedOut: too long", retryable=True)  # the token: not enough
    time.sleep(0.5)
    assert not got
    assert pool.force(("task", 1))
    outcome = wait_for(got)
    assert (outcome.status, outcome.error) == ("failed", "TimedOut: too long")
    assert "time.sleep(seconds)" in outcome.traceback  # where the signal found it
    assert "ForcedStop" in outcome.traceback
    assert outcome.extra == {"retryable": True}
    assert pool.died == 0  # the same process goes on
    assert pool.execute(("task", 2), call_of(NAP, 0), RunGuard()).status == "succeeded"


def test_a_worker_process_killed_in_a_stopped_call_is_recorded_with_the_reason(
    pool: ProcessPool, tmp_path: Path
) -> None:
    guard = RunGuard()
    got = napping(pool, ("run", 7), guard, tmp_path)
    guard.stop("Aborted: asked", retryable=False)
    pid = pool.kill(("run", 7))
    assert pid is not None
    outcome = wait_for(got)
    assert (outcome.status, outcome.error) == (
        "failed",
        "Aborted: asked; it did not stop when forced, and its process was killed",
    )
    assert outcome.extra == {"retryable": False}
    assert pool.kill(("run", 7)) is None and not pool.force(("run", 7))  # over
    assert pool.died == 1
    # A new worker process took its place.
    assert pool.execute(("task", 1), call_of(NAP, 0), RunGuard()).status == "succeeded"
    assert pool.started == 2


def test_a_call_stopped_before_it_began_is_not_sent(pool: ProcessPool) -> None:
    guard = RunGuard()
    guard.stop("Aborted: early")
    outcome = pool.execute(("task", 1), call_of(NAP, 60), guard)
    assert (outcome.status, outcome.error) == ("failed", "Aborted: early")
    assert outcome.duration is not None and outcome.duration < 1


def test_a_worker_process_that_died_while_idle_is_replaced_without_failing_a_run(
    pool: ProcessPool,
) -> None:
    [idle] = pool._idle
    os.kill(idle.pid, signal.SIGKILL)
    idle.process.wait(10)
    outcome = pool.execute(("task", 1), call_of(NAP, 0), RunGuard())
    assert outcome.status == "succeeded"
    assert (pool.started, pool.died) == (2, 1)


def test_the_class_names_of_what_a_call_raised_come_back_from_the_worker_process(
    pool: ProcessPool,
) -> None:
    # A retry policy's retry_on / give_up_on match them in the node (docs/retries.md).
    call = call_of("tests.integration.testapp.tasks:flaky", "p", 1, "ConnectionResetError")
    outcome = pool.execute(("task", 1), call, RunGuard())
    assert outcome.status == "failed"
    assert outcome.extra["errors"] == (
        "builtins.ConnectionResetError",
        "builtins.ConnectionError",
        "builtins.OSError",
        "builtins.Exception",
        "builtins.BaseException",
    )


def test_a_snooze_comes_back_from_the_worker_process(pool: ProcessPool) -> None:
    # raised in a nested call there; the node lets it wait (docs/retries.md, "Snooze")
    call = call_of("tests.integration.testapp.tasks:snoozing", "p", 1, 12.5)
    outcome = pool.execute(("task", 1), dataclasses.replace(call, task_id=1), RunGuard())
    assert (outcome.status, outcome.error) == ("snoozed", "snoozed: runs again in 12.5s")
    assert outcome.extra == {"retryable": False, "snooze": 12.5}
    assert pool.died == 0
