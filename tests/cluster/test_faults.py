"""Faults with real ``runscheduler`` processes on PostgreSQL: ``kill -9`` mid-batch, a
task running past its lease, a task that takes its process down, a task raising
SystemExit, a task's error holding NUL, the node holding a schedule killed, a SIGTERM
past ``SHUTDOWN_TIMEOUT``, a node paused (SIGSTOP) past ``NODE_TIMEOUT``, caught-up
occurrences under the overlap policy.

The nodes share the suite's PostgreSQL server (a database of their own, emptied
between tests); tests/cluster/test_mariadb_faults.py runs the same tests on MariaDB.
Jobs append ``start``/``end`` lines with their process id and the time to a log file,
so a test sees which functions ran where and when; the ``Run`` table says what the
scheduler recorded.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.acceptance.conftest import wait_until
from tests.cluster.conftest import Site
from tests.throwaway import ENV_LOG

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def now(site: Site) -> datetime:
    """The server's time, aware."""
    value: datetime = site.one(f"SELECT {site.NOW_SQL}")
    return value


# -- 1. only a task whose function started is charged ------------------------------------
@pytest.mark.parametrize(
    "pool", ["thread", pytest.param("process", marks=pytest.mark.executor_variant)]
)
def test_kill_9_charges_only_the_tasks_whose_function_had_started(site: Site, pool: str) -> None:
    ids = site.django(
        "from django_htask import schedule\n"
        "from tests.cluster.clusterapp.tasks import slow\n"
        "for n in range(24):\n"
        "    print(schedule(slow, n, 2.0, max_attempts=1 if n % 2 else 3).pk)\n"
    ).split()
    number = {int(task_id): str(n) for n, task_id in enumerate(ids)}

    def count(word: str) -> Counter[str]:
        return Counter(parts[1] for parts in site.lines() if parts[0] == word)

    first = site.node("--workers", "4", "--pool", pool)
    wait_until(
        lambda: sum(count("end").values()) >= 8 and sum(count("start").values()) >= 12,
        60,
        "8 jobs done and the next 4 started",
    )
    first.process.send_signal(signal.SIGKILL)
    first.wait_exit()
    running_at_kill = set(count("start")) - set(count("end"))
    assert 1 <= len(running_at_kill) <= 4
    # (n, process) of the calls cut short: with the process pool, its worker processes
    # must end with their node, not finish those calls while another node retries them.
    cut_short = {(p[1], p[2]) for p in site.lines() if p[0] == "start" and p[1] in running_at_kill}
    site.node("--workers", "4", "--pool", pool)  # declares the killed one dead (6 s)
    wait_until(
        lambda: (
            not site.sql("SELECT 1 FROM django_htask_task WHERE status IN ('pending', 'running')")
        ),
        90,
        "every task finished",
    )
    starts = count("start")
    crashed = Counter(
        task_id
        for (task_id,) in site.sql(
            "SELECT task_id FROM django_htask_run WHERE error LIKE '%%stopped answering%%'"
        )
    )
    for task_id, status, attempts, max_attempts, error in site.sql(
        "SELECT id, status, attempts, max_attempts, last_error FROM django_htask_task"
    ):
        n = number[task_id]
        assert attempts == starts[n], (n, attempts, starts[n])
        if n in running_at_kill:
            assert crashed[task_id] == 1
            if max_attempts == 1:
                assert status == "failed"
                assert "stopped answering during attempt 1 of 1" in error
            else:
                assert (status, attempts) == ("succeeded", 2)
        else:
            assert (status, attempts, crashed[task_id]) == ("succeeded", 1, 0), n
    assert not cut_short & {(p[1], p[2]) for p in site.lines() if p[0] == "end"}


def test_kill_9_hands_back_the_buffered_tasks_not_begun_uncharged(site: Site) -> None:
    """A node claims ahead (``PREFETCH_WITHIN``: here 10 s, so that 2 s calls fill
    the buffer, ``PREFETCH_PER_WORKER`` 1: a buffer of 2) due tasks beyond its free
    workers, running in the database with no start time. Killed, it charged the tasks
    its workers had begun (their start written by its next claim) and none of those
    that waited in its buffer: another node runs those once, at their first attempt."""
    ids = site.django(
        "from django_htask import schedule\n"
        "from tests.cluster.clusterapp.tasks import slow\n"
        "for n in range(16):\n"
        "    print(schedule(slow, n, 2.0).pk)\n"
    ).split()
    number = {int(task_id): str(n) for n, task_id in enumerate(ids)}
    first = site.node(
        "--workers",
        "2",
        HTASK_CLUSTER_PREFETCH_WITHIN="10",
        HTASK_CLUSTER_PREFETCH_PER_WORKER="1",
    )

    def held() -> list[tuple[int, bool]]:
        return site.sql(
            "SELECT id, started_at IS NOT NULL FROM django_htask_task WHERE status = 'running'"
        )

    def settled() -> bool:
        """Two tasks begun and marked so, two buffered, after two ended (the buffer's
        size is known from then on)."""
        rows = held()
        begun = {number[task_id] for task_id, marked in rows if marked}
        return (
            len(rows) == 4
            and len(site.lines()) >= 6  # 2 starts and ends, then 2 starts
            and begun
            == {p[1] for p in site.lines() if p[0] == "start"}
            - {p[1] for p in site.lines() if p[0] == "end"}
        )

    wait_until(settled, 60, "2 tasks begun and marked, 2 buffered")
    rows = held()
    first.process.send_signal(signal.SIGKILL)
    first.wait_exit()
    killed = {number[task_id] for task_id, marked in rows if marked}
    buffered = {number[task_id] for task_id, marked in rows if not marked}
    assert len(buffered) == 2 and not buffered & {p[1] for p in site.lines()}
    site.node("--workers", "4")  # declares the killed one dead (6 s)
    wait_until(
        lambda: (
            not site.sql("SELECT 1 FROM django_htask_task WHERE status IN ('pending', 'running')")
        ),
        90,
        "every task finished",
    )
    starts = Counter(parts[1] for parts in site.lines() if parts[0] == "start")
    for task_id, status, attempts, error in site.sql(
        "SELECT id, status, attempts, last_error FROM django_htask_task"
    ):
        n = number[task_id]
        assert attempts == starts[n] == 1, (n, attempts, starts[n])
        if n in killed:  # max_attempts 1
            assert (status, "stopped answering during attempt 1 of 1" in error) == ("failed", True)
        else:
            assert status == "succeeded", (n, status, error)
    with_runs = {number[task_id] for (task_id,) in site.sql("SELECT task_id FROM django_htask_run")}
    assert with_runs == killed  # a failed attempt's row each; none for a buffered task


def test_a_task_running_past_its_lease_keeps_it_and_runs_once(site: Site) -> None:
    """``LEASE`` 8 s, a beat every second (the cluster settings), a task of 12 s, two
    nodes: a beat leaves a lease taken less than an interval before, and the next one
    renews it, so the lease never lapses while its node lives (at least
    ``LEASE`` - 2 intervals left at any time) and no node takes the task back."""
    (task_id,) = site.django(
        "from django_htask import schedule\n"
        "from tests.cluster.clusterapp.tasks import slow\n"
        "print(schedule(slow, 0, 12.0).pk)\n"
    ).split()
    site.node()
    site.node()
    wait_until(lambda: any(p[0] == "start" for p in site.lines()), 60, "the task to start")
    left = []
    deadline = time.monotonic() + 30
    while not any(p[0] == "end" for p in site.lines()):
        assert time.monotonic() < deadline, f"the 12 s task has not ended: {site.lines()}"
        [(expires, server_now)] = site.sql(
            f"SELECT lease_expires_at, {site.NOW_SQL} FROM django_htask_task WHERE id = %s",
            task_id,
        )
        if expires is not None:  # NULL once its end is written
            left.append((expires - server_now).total_seconds())
        time.sleep(0.25)
    # Sampled through the 12 s; LEASE - 2 intervals = 6 s at least, less a late beat's
    # delay (a lapse not renewed would go to 0 and below).
    assert len(left) > 30 and min(left) > 4, left
    wait_until(
        lambda: (
            site.sql("SELECT status FROM django_htask_task WHERE id = %s", task_id)
            == [("succeeded",)]
        ),
        30,
        "the task to succeed",
    )
    assert [p[0] for p in site.lines()] == ["start", "end"]
    assert site.sql("SELECT attempts FROM django_htask_task WHERE id = %s", task_id) == [(1,)]


# -- 2. a task that takes its process down, or raises SystemExit -----------------------------
# RETRY_BACKOFF is 0.5 s here (HTASK_CLUSTER_RETRY_BACKOFF): a retry comes 0.5 s, then 1 s,
# after a failed attempt. On PostgreSQL a node never declares its predecessor dead by its pid: a
# node that died is reaped when its heartbeat is NODE_TIMEOUT (6 s) old.
TASKS = "tests.cluster.clusterapp.tasks"


def wait_for_the_task_after_it(site: Site) -> None:
    """Wait until a ``noop`` task queued after a failing one has succeeded."""
    wait_until(
        lambda: site.sql(
            "SELECT 1 FROM django_htask_task WHERE function LIKE '%%noop' AND status = 'succeeded'"
        ),
        30,
        "the task after it",
    )


def started_by(site: Site, function: str) -> list[str]:
    """The processes that started ``function`` (``die`` or ``exits``), in order."""
    return [parts[2] for parts in site.lines() if parts[:2] == ["start", function]]


def test_a_task_that_takes_its_process_down_is_tried_max_attempts_times_then_fails(
    site: Site,
) -> None:
    site.django(f"from django_htask import schedule\nschedule('{TASKS}:die', max_attempts=2)\n")
    dead: list[str] = []
    for _attempt in (1, 2):  # each start (as systemd would) tries it again, and dies
        node = site.spawn()
        # the first at once; the second once the first is reaped (6 s) and 10 s later
        assert node.wait_exit(timeout=90) == 1, node.stderr
        dead.append(str(node.process.pid))
        assert started_by(site, "die") == dead  # once in each node, which it took down
    survivor = site.node()
    wait_until(
        lambda: site.sql("SELECT status FROM django_htask_task") == [("failed",)],
        60,
        "the poison task failed",
    )
    [(attempts, error)] = site.sql("SELECT attempts, last_error FROM django_htask_task")
    assert attempts == 2
    assert "stopped answering during attempt 2 of 2: killed, crashed or out of memory" in error
    runs = site.sql("SELECT status, attempt FROM django_htask_run ORDER BY attempt")
    assert runs == [("failed", 1), ("failed", 2)]
    site.django(f"from django_htask import schedule\nschedule('{TASKS}:noop', 1)\n")
    wait_until(
        lambda: site.sql("SELECT 1 FROM django_htask_task WHERE status = 'succeeded'"),
        30,
        "the next task",
    )
    assert len(started_by(site, "die")) == 2  # never a third time
    assert survivor.process.poll() is None


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        ("system", "SystemExit: 1"),
        pytest.param("keyboard", "KeyboardInterrupt", marks=pytest.mark.executor_variant),
    ],
)
def test_a_task_raising_system_exit_fails_and_the_node_goes_on(
    site: Site, kind: str, error: str
) -> None:
    node = site.node(HTASK_CLUSTER_RETRY_BACKOFF="0.5")
    site.django(
        "from django_htask import schedule\n"
        f"schedule('{TASKS}:exits', {kind!r}, max_attempts=3)\n"
        f"schedule('{TASKS}:noop', 1, delay=1)\n"
    )
    wait_for_the_task_after_it(site)
    failed = "SELECT status FROM django_htask_task WHERE function LIKE '%%exits'"
    # attempts at once, 0.5 s and 1.5 s later
    wait_until(lambda: site.sql(failed) == [("failed",)], 30, "three attempts")
    runs = site.sql(
        "SELECT status, error, traceback FROM django_htask_run WHERE function LIKE '%%exits'"
    )
    assert len(runs) == 3  # retried like any failure, then failed: never an endless loop
    for status, message, traceback in runs:
        assert status == "failed" and message.startswith(error), message
        assert "Traceback" in traceback and error.partition(":")[0] in traceback, traceback
    assert started_by(site, "exits") == [str(node.process.pid)] * 3  # the node went on
    node.send(signal.SIGTERM)
    assert node.wait_exit() == 0, node.stderr
    # The next node runs what comes after, and never the failed task again.
    site.node()
    site.django(f"from django_htask import schedule\nschedule('{TASKS}:noop', 2)\n")
    wait_until(
        lambda: len(site.sql("SELECT 1 FROM django_htask_task WHERE status = 'succeeded'")) == 2,
        30,
        "the task after the restart",
    )
    assert site.sql(failed) == [("failed",)]
    assert len(started_by(site, "exits")) == 3


def test_an_error_text_with_a_nul_is_stored_escaped_and_the_node_goes_on(site: Site) -> None:
    """A task's exception message holding NUL (from its arguments, sent by anyone):
    PostgreSQL's text columns refuse it. The node stores it escaped and goes on; it
    used to retry the write of its whole batch for ever, recording and claiming
    nothing more."""
    node = site.node()
    site.django(
        "from django_htask import schedule\n"
        f"schedule('{TASKS}:fails', 'bad\\x00value', max_attempts=1)\n"
        f"schedule('{TASKS}:noop', 1, delay=1)\n"
    )
    wait_for_the_task_after_it(site)
    error = "RuntimeError: bad\\x00value"
    assert site.sql(
        "SELECT status, last_error FROM django_htask_task WHERE function LIKE '%%fails'"
    ) == [("failed", error)]
    [(status, message, traceback)] = site.sql(
        "SELECT status, error, traceback FROM django_htask_run WHERE function LIKE '%%fails'"
    )
    assert (status, message) == ("failed", error)
    assert "bad\\x00value" in traceback
    assert started_by(site, "fails") == [str(node.process.pid)]
    assert node.process.poll() is None


# -- 9. the node holding a schedule is killed: the schedule goes on within seconds ---------
@pytest.mark.parametrize(
    "pool", ["thread", pytest.param("process", marks=pytest.mark.executor_variant)]
)
def test_a_schedule_keeps_firing_within_seconds_when_its_node_is_killed(
    site: Site, pool: str
) -> None:
    """Three nodes with django-htask's default settings (NODE_TIMEOUT 60 s); the one
    that fires an ``@every 1s`` schedule is killed: its standby fires it within
    STANDBY_DELAY (2 s), long before the dead node could be declared dead. With the
    process pool too (2 worker processes a node)."""
    sid = site.schedule("every-second", "@every 1s", "tests.cluster.clusterapp.tasks:tick")
    options = ("--pool", "process", "--workers", "2") if pool == "process" else ()
    nodes = [site.node(*options, HTASK_CLUSTER_DEFAULTS="1") for _ in range(3)]
    runs = "SELECT node, scheduled_for, status FROM django_htask_run WHERE schedule_id = %s"
    wait_until(lambda: len(site.sql(runs, sid)) >= 5, 30, "the schedule running")
    # The owner may change while the members settle: take the one firing now.
    time.sleep(1.5)
    holder_id = site.sql(runs + " ORDER BY scheduled_for DESC LIMIT 1", sid)[0][0]
    [holder] = [n for n in nodes if f"node:      {holder_id}" in n.stdout]
    killed_at = now(site)
    holder.process.send_signal(signal.SIGKILL)
    holder.wait_exit()
    wait_until(lambda: now(site) > killed_at + timedelta(seconds=12), 20, "12 s")
    rows = site.sql(runs + " ORDER BY scheduled_for", sid)
    fired = [when for _node, when, status in rows if status in ("succeeded", "running")]
    assert len(fired) == len(set(fired)), "an occurrence fired twice"
    around = [w for w in fired if killed_at - timedelta(seconds=5) <= w]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(around)]
    assert max(gaps) <= 5.0, gaps
    after = {node for node, when, _ in rows if when > killed_at + timedelta(seconds=5)}
    assert after and holder_id not in after


# -- 10. the overlap policy on every path ----------------------------------------------------
def intervals(site: Site) -> list[tuple[str, float, float | None]]:
    """(pid, start, end or None) of each ``hold`` run, from the log, by start."""
    open_: dict[str, float] = {}
    spans: list[tuple[str, float, float | None]] = []
    for word, pid, at in site.lines():
        if word == "start":
            open_[pid] = float(at)
        elif word == "end":
            spans.append((pid, open_.pop(pid), float(at)))
    spans += [(pid, start, None) for pid, start in open_.items()]
    return sorted(spans, key=lambda s: s[1])


def assert_one_at_a_time(spans: list[tuple[str, float, float | None]], cut: float) -> None:
    """No run started before the previous one ended (a run never ended when its process
    died: it ends at ``cut``)."""
    for (_p, _s, end), (_q, start, _e) in itertools.pairwise(spans):
        assert start >= (end if end is not None else cut), spans


HOLD = "tests.cluster.clusterapp.tasks:hold"


@pytest.mark.parametrize("overlap", ["skip", "delay"])
def test_caught_up_occurrences_follow_the_overlap_policy(site: Site, overlap: str) -> None:
    sid = site.schedule(
        "caught", "@every 1s", HOLD, 0.4, catch_up="all", overlap=overlap, grace=None
    )
    site.sql(
        f"UPDATE django_htask_schedule SET next_run_at = {site.ago_sql(5)} WHERE id = %s",
        sid,
    )
    node = site.node("--workers", "8")
    wait_until(lambda: len(intervals(site)) >= (2 if overlap == "skip" else 7), 30, "the runs")
    node.send(signal.SIGTERM)
    assert node.wait_exit() == 0, node.stderr
    assert_one_at_a_time(intervals(site), cut=time.time())
    statuses = Counter(
        s for (s,) in site.sql("SELECT status FROM django_htask_run WHERE schedule_id = %s", sid)
    )
    if overlap == "skip":
        skipped = site.one(
            "SELECT error FROM django_htask_run WHERE schedule_id = %s AND status = 'skipped' "
            "ORDER BY id LIMIT 1",
            sid,
        )
        assert skipped.startswith("skipped: the run of "), skipped
        assert statuses["skipped"] >= 5, statuses
    else:  # the six caught up ran, one after another, then the schedule went on
        assert statuses["succeeded"] >= 7 and not statuses["skipped"], statuses


def test_a_node_stopping_past_its_timeout_is_gone_before_another_starts_its_schedule(
    site: Site,
) -> None:
    sid = site.schedule("held", "@every 1s", HOLD, 30.0, 0.1, overlap="skip")
    a = site.node(HTASK_CLUSTER_SHUTDOWN="0.5")
    wait_until(lambda: intervals(site), 30, "a first run")
    b = site.node(HTASK_CLUSTER_SHUTDOWN="0.5")
    [(pid, _start, _end)] = intervals(site)
    first, other = (a, b) if int(pid) == a.process.pid else (b, a)
    first.send(signal.SIGTERM)
    assert first.wait_exit(timeout=10) == 0, first.stderr
    assert "leaving 1 runs unfinished" in first.stdout
    wait_until(lambda: len(intervals(site)) >= 2, 30, "the other node's run")
    spans = intervals(site)
    assert spans[0][0] == pid and spans[0][2] is None  # killed with its process
    assert spans[1][0] == str(other.process.pid)
    # The run ticks every 0.1 s while it lives: its last tick is when it was last seen.
    last_alive = max(float(at) for word, p, at in site.lines() if word == "tick" and p == pid)
    assert spans[1][1] > last_alive, (spans, last_alive)
    # The first run (a node slow to start folds the occurrences due before it into its
    # first run: their rows come first).
    first_run = (
        "SELECT status, error FROM django_htask_run WHERE schedule_id = %s "
        "AND status NOT IN ('skipped', 'missed') ORDER BY id LIMIT 1"
    )
    wait_until(lambda: site.sql(first_run, sid)[0][0] == "failed", 30, "the interrupted run failed")
    [(_status, error)] = site.sql(first_run, sid)
    assert error.startswith("interrupted: the node stopped (SHUTDOWN_TIMEOUT 0.5s)"), error


def test_a_node_paused_past_the_node_timeout_stays_dead(site: Site) -> None:
    """SIGSTOP for 10 s with NODE_TIMEOUT 6 s (a VM frozen, a swap storm): the other
    node declares it dead, fails its run and runs the schedule; when it resumes it
    starts nothing more, its late result is refused, it says so and exits (status 3)."""
    sid = site.schedule("paused", "@every 1s", HOLD, 4.0, overlap="skip")
    # Both nodes up before the first run, which is then the only one (a node slow to
    # start, started after it, would leave time for more: the runs are 4 s).
    a, b = site.node(), site.node()
    wait_until(lambda: intervals(site), 30, "a first run")
    [(pid, _start, _end)] = intervals(site)
    paused, other = (a, b) if int(pid) == a.process.pid else (b, a)
    paused.process.send_signal(signal.SIGSTOP)
    stopped_at = time.time()
    wait_until(lambda: time.time() > stopped_at + 10, 15, "10 s")
    resumed = time.time()
    paused.process.send_signal(signal.SIGCONT)
    assert paused.wait_exit(timeout=30) == 3, paused.stderr
    assert "was declared dead by the other nodes" in paused.stderr
    # The first run (a node slow to start folds the occurrences due before it into its
    # first run: their rows come first).
    first = site.sql(
        "SELECT node, status, error FROM django_htask_run WHERE schedule_id = %s "
        "AND status NOT IN ('skipped', 'missed') ORDER BY id LIMIT 1",
        sid,
    )
    [(node, status, error)] = first
    assert (status, "stopped answering" in error) == ("failed", True), first
    later_starts = [s for s in intervals(site) if s[0] == pid and s[1] > resumed]
    assert later_starts == []  # it started nothing after it came back
    others = [s for s in intervals(site) if s[0] == str(other.process.pid)]
    assert others and others[0][1] < resumed  # the survivor ran it meanwhile
    succeeded_on_paused = site.sql(
        "SELECT count(*) FROM django_htask_run WHERE node = %s AND status = 'succeeded'", node
    )
    assert succeeded_on_paused == [(0,)]  # its late result did not overwrite the failure


# -- a rolling restart under load ------------------------------------------------------------
def test_a_rolling_restart_under_load_takes_no_lock_and_runs_each_task_once(site: Site) -> None:
    """Each of three nodes is stopped and started again in turn while the others claim
    a stream of tasks: a node's start finds the triggers current and locks no table (it
    used to replace them, a lock that made the running nodes' claims wait or deadlock),
    nothing fails, and every task runs exactly once."""
    nodes = [site.node() for _ in range(3)]
    site.django(
        "from django_htask import schedule\n"
        f"for n in range(600):\n    schedule('{TASKS}:job', n, delay=n / 100)\n"
    )
    for i, node in enumerate(list(nodes)):
        wait_until(lambda i=i: len(site.lines()) >= 100 * (i + 1), 60, f"jobs before restart {i}")
        node.send(signal.SIGTERM)
        assert node.wait_exit() == 0, node.stderr
        nodes.append(site.node())
    wait_until(
        lambda: (
            site.one("SELECT count(*) FROM django_htask_task WHERE status = 'succeeded'") == 600
        ),
        90,
        "every task run",
    )
    assert Counter(int(parts[0]) for parts in site.lines()) == Counter(range(600))
    for node in nodes:
        log = node.stderr.lower()
        assert "deadlock" not in log and "database unavailable" not in log, (
            node.stderr + server_deadlocks()
        )


def server_deadlocks() -> str:
    """The end of the database server's log if it reports a deadlock (MariaDB logs each
    one's transactions and statements: tests.mariadbcluster), to show with a failure."""
    path = os.environ.get(ENV_LOG)
    text = Path(path).read_text(errors="replace") if path and Path(path).exists() else ""
    if "deadlock" not in text.lower():
        return ""
    return f"\nthe end of the server's log:\n{text[-20000:]}"
