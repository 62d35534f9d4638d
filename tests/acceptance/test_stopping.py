"""Timeouts and aborts with a real ``runscheduler`` process on SQLite (docs/timeouts.md).

Each way a task hangs — ``time.sleep`` and a socket read (blocked in C), an endless
Python loop, a task waiting on its token — with a timeout and without one (then
aborted from another process). The settings give ``TIMEOUT_GRACE`` 1 s."""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .conftest import Scheduler, wait_until

pytestmark = pytest.mark.slow

Query = Callable[..., list[tuple[Any, ...]]]
HANG = "tests.acceptance.app.tasks:hang"
NOOP = "tests.acceptance.app.tasks:noop"
GRACE = 1.0
GIVEN_UP = "; it did not stop when forced, and its worker thread was given up"
#: Whether a forced stop reaches each kind (else its thread is given up).
FORCED = {"sleep": False, "socket": False, "loop": True, "cooperative": True}
HANG_RUN = "SELECT status, error, duration, attempt FROM django_htask_run WHERE function = %r"


def started(log: Path, kind: str) -> bool:
    return log.exists() and f"start {kind}" in log.read_text()


def hang_runs(query: Query) -> list[tuple[Any, ...]]:
    return query(HANG_RUN.replace("%r", "?"), HANG)


@dataclass(frozen=True)
class Hung:
    node: Scheduler
    token: str


@pytest.fixture
def hang(
    start_scheduler: Callable[..., Scheduler],
    django_code: Callable[[str], str],
    tmp_path: Path,
) -> Callable[..., Hung]:
    """Start a node, schedule a hung task of a kind (with ``options``) and ``behind``
    trivial tasks after it, and wait until the hung one runs."""

    def start(
        kind: str, *, workers: int = 1, behind: int = 0, pool: str = "thread", **options: Any
    ) -> Hung:
        node = start_scheduler("--workers", str(workers), "--poll-interval", "0.2", "--pool", pool)
        log = tmp_path / "jobs.log"
        given = "".join(f", {key}={value!r}" for key, value in options.items())
        token = django_code(
            "from django_htask import schedule\n"
            f"print(schedule({HANG!r}, {kind!r}, {str(log)!r}{given}).token)\n"
            f"for i in range({behind}):\n    schedule({NOOP!r}, str(i), delay=0.5)\n"
        ).strip()
        wait_until(lambda: started(log, kind), 30, "the hung task")
        return Hung(node, token)

    return start


def suffix(kind: str, pool: str) -> str:
    """What the error of a run forced to stop ends with: in a worker thread, a call
    blocked in C is given up; in a worker process, the signal stops every kind."""
    return GIVEN_UP if pool == "thread" and not FORCED[kind] else ""


@pytest.mark.parametrize("pool", ["thread", "process"])
@pytest.mark.parametrize("kind", list(FORCED))
def test_a_hung_task_with_a_timeout_is_stopped_and_the_tasks_behind_it_run(
    hang: Callable[..., Hung], query: Query, kind: str, pool: str
) -> None:
    node = hang(kind, timeout=2, behind=20, pool=pool).node
    done = "SELECT count(*) FROM django_htask_task WHERE status = 'succeeded'"
    wait_until(lambda: query(done) == [(20,)], 30, "the 20 tasks behind it, on its worker")
    [(status, error, duration, attempt)] = hang_runs(query)
    expected = "TimedOut: the run took longer than its timeout of 2s" + suffix(kind, pool)
    assert (status, error, attempt) == ("failed", expected, 1)
    assert 2 <= duration < 2 + GRACE + 1  # recorded within timeout + grace + 1 s
    assert query("SELECT status FROM django_htask_task WHERE function = ?", HANG) == [("failed",)]
    node.send(signal.SIGTERM)
    assert node.wait_exit() == 0, node.stderr
    assert node.stdout.rstrip().endswith("stopped.")


@pytest.mark.parametrize("pool", ["thread", "process"])
@pytest.mark.parametrize("kind", ["cooperative", "sleep"])
def test_an_abort_from_another_process_stops_a_running_task_and_it_is_not_retried(
    hang: Callable[..., Hung],
    django_code: Callable[[str], str],
    query: Query,
    kind: str,
    pool: str,
) -> None:
    hung = hang(kind, max_attempts=3, pool=pool)
    said = django_code(f"from django_htask import abort\nprint(abort({hung.token!r}).value)\n")
    assert said.strip() == "requested"
    wait_until(lambda: hang_runs(query), 30, "its run recorded")
    [(status, error, _duration, attempt)] = hang_runs(query)
    expected = "Aborted: an abort was asked for (cancel(token, abort=True) or the admin)"
    expected += suffix(kind, pool)
    assert (status, error, attempt) == ("failed", expected, 1)
    wait_until(
        lambda: query("SELECT status, attempts FROM django_htask_task") == [("failed", 1)],
        10,
        "the task failed, never retried",
    )
    again = django_code(f"from django_htask import abort\nprint(abort({hung.token!r}).value)\n")
    assert again.strip() == "not_found"  # finished
    assert hung.node.process.poll() is None


def test_sigterm_while_a_timeout_forces_a_stuck_task_stops_cleanly(
    hang: Callable[..., Hung], query: Query
) -> None:
    node = hang("sleep", workers=2, timeout=2, max_attempts=2).node
    node.send(signal.SIGTERM)  # the node waits for it: SHUTDOWN_TIMEOUT 10 s
    assert node.wait_exit(30) == 0, node.stderr
    [(status, error, _duration, _attempt)] = hang_runs(query)
    assert (status, error) == (
        "failed",
        "TimedOut: the run took longer than its timeout of 2s" + GIVEN_UP,
    )
    [(task_status, lease)] = query("SELECT status, locked_by FROM django_htask_task")
    assert (task_status, lease) == ("pending", None)  # its retry, for the next node
    assert node.stdout.rstrip().endswith("stopped.")


def stuck_node(
    db_file: Path, django_code: Callable[[str], str], log: Path, *args: str
) -> Scheduler:
    """A node that gives up the thread of a hung task, one more than it may
    (``MAX_ABANDONED_THREADS`` 0)."""
    django_code(
        f"from django_htask import schedule\nschedule({HANG!r}, 'sleep', {str(log)!r}, timeout=1)\n"
    )
    return Scheduler(
        db_file, ["--poll-interval", "0.2", *args], {"HTASK_ACCEPTANCE_MAX_ABANDONED": "0"}
    )


def test_a_node_with_too_many_stuck_threads_starts_afresh_as_a_new_node(
    db_file: Path,
    django_code: Callable[[str], str],
    query: Query,
    tmp_path: Path,
) -> None:
    node = stuck_node(db_file, django_code, tmp_path / "jobs.log")
    nodes = "SELECT id, pid, stopped_at FROM django_htask_node ORDER BY started_at"
    try:
        wait_until(lambda: "starting afresh" in node.stdout, 30, "the node starting afresh")
        assert "stopped: 1 worker thread is stuck (more than MAX_ABANDONED_THREADS)" in node.stdout
        wait_until(lambda: node.stdout.count("stop:") == 2, 30, "the new node's banner")
        (old, old_pid, stopped), (new, new_pid, running) = query(nodes)
        assert old != new and old_pid == new_pid == node.process.pid  # execv: the same pid
        assert stopped is not None and running is None
        assert f"node {old} stopped: 1 worker thread is stuck" in node.stderr  # node_reexec
        assert query("SELECT status FROM django_htask_task") == [("failed",)]
        django_code(f"from django_htask import schedule\nschedule({NOOP!r}, 'after')\n")
        ran = "SELECT node FROM django_htask_task WHERE status = 'succeeded'"
        assert wait_until(lambda: query(ran), 30, "a task after it") == [(new,)]
        node.send(signal.SIGTERM)
        assert node.wait_exit() == 0, node.stderr
        assert node.stdout.rstrip().endswith("stopped.")
    finally:
        node.kill()


def test_a_node_with_too_many_stuck_threads_exits_with_status_4_when_asked(
    db_file: Path,
    django_code: Callable[[str], str],
    query: Query,
    tmp_path: Path,
) -> None:
    node = stuck_node(db_file, django_code, tmp_path / "jobs.log", "--exit-when-stuck")
    try:
        assert node.wait_exit(30) == 4, node.stderr
        assert "stopped: 1 worker thread is stuck" in node.stdout
        assert "exit status 4" in node.stdout
        assert "(status 4)" in node.stderr  # the log line says it too
        assert query("SELECT status FROM django_htask_task") == [("failed",)]
    finally:
        node.kill()


SLOW = "tests.acceptance.app.tasks:slow"


def test_ten_tasks_stuck_in_c_the_node_starts_afresh_and_nothing_is_lost_or_run_twice(
    db_file: Path,
    django_code: Callable[[str], str],
    query: Query,
    tmp_path: Path,
) -> None:
    """Ten ``time.sleep`` hangs on the thread pool, ``MAX_ABANDONED_THREADS`` 9: the
    nine first show in ``htask status``; the tenth starts the node afresh while other
    tasks run and wait; each of those then runs exactly once, and each hang once."""
    log, work = tmp_path / "hangs.log", tmp_path / "work.log"
    hang = f"schedule({HANG!r}, 'sleep', {str(log)!r}, timeout=1)\n"
    django_code("from django_htask import schedule\n" + hang * 9)
    node = Scheduler(
        db_file,
        ["--workers", "4", "--poll-interval", "0.2"],
        {"HTASK_ACCEPTANCE_MAX_ABANDONED": "9"},
    )
    status = "from django.core.management import call_command\ncall_command('htask', 'status')\n"

    def stuck_in_status() -> str:
        said = django_code(status)
        return said if "9 stuck threads" in said else ""

    try:
        seen = wait_until(stuck_in_status, 60, "nine stuck threads in htask status")
        assert "starting afresh" not in node.stdout, seen
        # Work before and behind the tenth hang: some of it runs when the node stops.
        django_code(
            "from django_htask import schedule\n"
            f"for n in range(40):\n    schedule({SLOW!r}, n, 0.3, {str(work)!r}, delay=n / 20)\n"
            + hang
        )
        wait_until(lambda: "starting afresh" in node.stdout, 60, "the node starting afresh")
        assert "stopped: 10 worker threads are stuck" in node.stdout
        done = "SELECT count(*) FROM django_htask_task WHERE function = ? AND status = 'succeeded'"
        wait_until(lambda: query(done, SLOW) == [(40,)], 60, "the 40 tasks, on the new node")
        lines = [line.split()[:2] for line in work.read_text().splitlines()]
        for what in ("start", "end"):
            assert sorted(int(n) for said, n in lines if said == what) == list(range(40))
        assert log.read_text().count("start sleep") == 10
        ends = (
            "SELECT status, attempts, count(*) FROM django_htask_task WHERE function = ?"
            " GROUP BY status, attempts"
        )
        assert query(ends, HANG) == [("failed", 1, 10)]
        assert query(ends, SLOW) == [("succeeded", 1, 40)]  # none handed back twice
        runs = "SELECT function, count(*) FROM django_htask_run GROUP BY function"
        assert query(runs) == [(HANG, 10)]  # a first attempt that succeeds keeps no run
        (old, stopped), (new, running) = query(
            "SELECT id, stopped_at FROM django_htask_node ORDER BY started_at"
        )
        assert old != new and stopped is not None and running is None
        ran_on = "SELECT DISTINCT node FROM django_htask_task WHERE function = ? ORDER BY node"
        assert new in {n for (n,) in query(ran_on, SLOW)}  # the new node goes on serving
        node.send(signal.SIGTERM)
        assert node.wait_exit() == 0, node.stderr
    finally:
        node.kill()
