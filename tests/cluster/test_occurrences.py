"""Every occurrence of a schedule leaves exactly one ``Run`` row, with real
``runscheduler`` processes on PostgreSQL (and MariaDB: test_mariadb_occurrences.py):
the run, or the row that says why it did not run (missed, folded into a later run,
skipped), when the node firing it is killed and when a node joins before the killed one
is declared dead (issue 28).

Where the stopped node is not declared dead in the window, its schedules go on
through their standby alone (default timings: ``NODE_TIMEOUT`` 60 s, heartbeats every
10 s, ``STANDBY_DELAY`` 2 s), or through the node that owns them once its heartbeat is
late (heartbeats every second, ``NODE_TIMEOUT`` 30 s, a node paused with SIGSTOP). A
node killed is declared dead once its heartbeat is late and its database session
gone, a few heartbeats after its last, and a schedule whose run it was making runs
again then (:func:`test_a_node_killed_anywhere_in_its_cycle_leaves_one_row_per_occurrence`).
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

import pytest

from django_htask.partition import Partition
from tests.acceptance.conftest import Scheduler, wait_until
from tests.cluster.conftest import Site

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

TICK = "tests.cluster.clusterapp.tasks:tick"
STEP = timedelta(seconds=2)
RUNS = "SELECT scheduled_for, status, error FROM django_htask_run WHERE schedule_id = %s"
RAN = ("running", "succeeded", "failed")
#: What a failure shows of a schedule's rows from a time on.
DIAGNOSIS = (
    "SELECT scheduled_for, started_at, node, status FROM django_htask_run "
    "WHERE schedule_id = %s AND scheduled_for >= %s - INTERVAL '6' SECOND ORDER BY id"
)


def now(site: Site) -> datetime:
    value: datetime = site.one(f"SELECT {site.NOW_SQL}")
    return value


def among(values: Sequence[object]) -> str:
    """``(%s, ...)``, a placeholder for each of ``values`` (not empty): an ``IN`` list
    both servers take (PostgreSQL's ``= ANY(%s)`` of a list is its own)."""
    assert values
    return "(" + ", ".join(["%s"] * len(values)) + ")"


def schedules(site: Site, count: int, offset: int = 0) -> list[int]:
    """``count`` schedules ``@every 2s`` of ``tick``, made in one subprocess."""
    out = site.django(
        "from django_htask.models import Schedule\n"
        f"for i in range({offset}, {offset + count}):\n"
        f"    s = Schedule(name=f'every-2s-{{i}}', function={TICK!r}, schedule='@every 2s')\n"
        "    s.set_call(())\n"
        "    s.save()\n"
        "    print(s.pk)\n"
    )
    return [int(line) for line in out.split()]


def new_standby_of_b(sid: int) -> bool:
    """Whether ``occ-b`` owns ``sid`` among ``occ-a``, ``occ-b`` and ``occ-c``, and
    ``occ-c`` would be its standby (it ranks between ``occ-b`` and ``occ-a``)."""
    return Partition("occ-c", ["occ-a", "occ-b", "occ-c"]).role(sid) == "occ-b"


def schedules_with(site: Site, count: int, wanted: int) -> tuple[list[int], list[int]]:
    """At least ``count`` schedules, made until ``wanted`` of them have ``occ-c`` as the
    new standby of ``occ-b`` (one in six does): all of them, and those."""
    ids: list[int] = []
    while len(ids) < count or sum(map(new_standby_of_b, ids)) < wanted:
        ids += schedules(site, 6, offset=len(ids))
    return ids, [sid for sid in ids if new_standby_of_b(sid)]


def assert_one_row_per_occurrence(
    site: Site, sid: int, through: datetime | None, step: timedelta = STEP
) -> int:
    """Every occurrence of ``sid`` (every ``step``) from its first row to the last one
    that ran (which must be past ``through``, unless None) has exactly one row, and no
    row is off the schedule's sequence. Return how many occurrences did not run."""
    rows = site.sql(RUNS + " ORDER BY scheduled_for", sid)
    per_time = Counter(when for when, _status, _error in rows)
    twice = {when: n for when, n in per_time.items() if n > 1}
    assert not twice, f"schedule {sid}: occurrences with several rows: {twice}"
    ran = [when for when, status, _error in rows if status in RAN]
    first, last = rows[0][0], max(ran)
    if through is not None:
        assert last > through, (sid, last, through, site.sql(DIAGNOSIS, sid, last))
    expected = []
    when = first
    while when <= last:
        expected.append(when)
        when += step
    seen = [when for when, _status, _error in rows if when <= last]
    missing = sorted(set(expected) - set(seen))
    assert not missing, f"schedule {sid}: occurrences without a row: {missing}"
    assert seen == expected, f"schedule {sid}: rows off the sequence: {set(seen) - set(expected)}"
    not_run = [(w, s, e) for w, s, e in rows if w <= last and s not in RAN]
    for _when, status, error in not_run:
        assert status in ("missed", "skipped") and error, (status, error)
    return len(not_run)


def holder_of(site: Site, sid: int) -> str | None:
    """The node that ran the latest occurrence of ``sid`` (None: none ran yet)."""
    rows = site.sql(
        "SELECT node FROM django_htask_run WHERE schedule_id = %s AND status IN "
        "('running', 'succeeded') ORDER BY scheduled_for DESC LIMIT 1",
        sid,
    )
    return rows[0][0] if rows else None


def left_running(site: Site, sid: int, node: str = "occ-b") -> bool:
    """Whether ``node`` was making a run of ``sid`` when it was killed (its row is
    still "running": only the reaper ends it, once ``node`` is declared dead)."""
    count: int = site.one(
        "SELECT count(*) FROM django_htask_run WHERE schedule_id = %s AND node = %s "
        "AND status = 'running'",
        sid,
        node,
    )
    return count > 0


def assert_skipped_for(site: Site, sid: int, after: datetime, node: str = "occ-b") -> None:
    """Under ``overlap="skip"``, a schedule with a run still going on ``node`` (killed,
    not yet declared dead) does not fire: each of its occurrences after ``after`` has a
    skipped row naming ``node``."""
    rows = site.sql(RUNS + " AND scheduled_for > %s", sid, after)
    assert rows and all(
        status == "skipped" and f"still running (on node {node})" in error
        for _when, status, error in rows
    ), (sid, rows)


def test_each_occurrence_has_one_row_when_the_owner_is_killed(site: Site) -> None:
    """Two nodes, ``@every 2s``, the one firing it killed with SIGKILL: the standby
    fires on, and the occurrence due while it waited for the owner has a row too."""
    [sid] = schedules(site, 1)
    nodes = {
        name: site.node("--node-id", name, HTASK_CLUSTER_DEFAULTS="1")
        for name in ("occ-a", "occ-b")
    }
    runs = f"SELECT count(*) FROM django_htask_run WHERE schedule_id = {sid}"
    wait_until(lambda: site.one(runs) >= 3, 30, "the schedule running")
    time.sleep(1.0)  # settled: the owner is the one firing now
    victim = holder_of(site, sid)
    assert victim is not None
    killed_at = now(site)
    nodes[victim].process.send_signal(signal.SIGKILL)
    nodes[victim].wait_exit()
    wait_until(lambda: now(site) > killed_at + timedelta(seconds=14), 20, "14 s")
    if left_running(site, sid, victim):  # killed in its run: skipped until it is dead
        assert_skipped_for(site, sid, killed_at + timedelta(seconds=4), victim)
        assert_one_row_per_occurrence(site, sid, None)
        return
    not_run = assert_one_row_per_occurrence(site, sid, killed_at + timedelta(seconds=8))
    after = {
        node
        for (node,) in site.sql(
            "SELECT node FROM django_htask_run WHERE schedule_id = %s AND scheduled_for > %s",
            sid,
            killed_at + timedelta(seconds=4),
        )
    }
    assert after and victim not in after, after
    assert not_run >= 1, "the occurrence due while the standby waited should not have run"


def kill_b(
    site: Site, ids: list[int], sig: int = signal.SIGKILL, **env: str
) -> tuple[Scheduler, datetime]:
    """Start ``occ-a`` and ``occ-b``; once ``occ-b`` fires its share of ``ids``, kill
    it (SIGKILL), or pause it (``sig``: SIGSTOP). Return ``occ-a`` and when ``occ-b``
    was stopped."""
    a = site.node("--node-id", "occ-a", **env)
    b = site.node("--node-id", "occ-b", **env)
    two = Partition("occ-a", ["occ-a", "occ-b"])
    of_b = [sid for sid in ids if two.owner(sid) == "occ-b"]
    wait_until(
        lambda: all(holder_of(site, sid) == "occ-b" for sid in of_b), 30, "occ-b firing its share"
    )
    killed_at = now(site)
    b.process.send_signal(sig)
    if sig == signal.SIGKILL:
        b.wait_exit()
    return a, killed_at


def nodes_firing(site: Site, ids: list[int], after: datetime) -> set[str]:
    """The nodes with a row of one of ``ids`` due after ``after``."""
    rows = site.sql(
        f"SELECT DISTINCT node FROM django_htask_run WHERE schedule_id IN {among(ids)} "
        "AND scheduled_for > %s",
        *ids,
        after,
    )
    return {node for (node,) in rows}


def run_c(site: Site, a: Scheduler, seconds: float, **env: str) -> datetime:
    """Start ``occ-c`` and let it run ``seconds`` beside ``occ-a``; return when it
    started."""
    site.node("--node-id", "occ-c", **env)
    joined = now(site)
    wait_until(lambda: now(site) > joined + timedelta(seconds=seconds), seconds + 20, "the run")
    assert a.process.poll() is None
    for node in (a, site.started[-1]):  # shown if the test fails
        print(node.stdout[-2000:], node.stderr[-6000:], sep="\n")
    return joined


def test_each_occurrence_has_one_row_when_a_node_joins_before_the_dead_one_is_declared_dead(
    site: Site,
) -> None:
    """``occ-b`` is killed; ``occ-c`` joins well within ``NODE_TIMEOUT``. The schedules
    for which ``occ-c`` ranks after ``occ-b`` and before ``occ-a`` (``occ-c`` is their
    new standby) keep one row per occurrence: ``occ-c`` fires them for the dead node.
    A schedule whose run ``occ-b`` was making as it was killed is skipped, saying so,
    until ``occ-b`` is declared dead: with heartbeats every 10 s it is late only after
    the test (two of ``occ-a``'s heartbeats), and ``NODE_TIMEOUT`` is 60 s."""
    ids, c_stands_by = schedules_with(site, 12, 2)
    a, killed_at = kill_b(site, ids, HTASK_CLUSTER_DEFAULTS="1")
    joined = run_c(site, a, 14, HTASK_CLUSTER_DEFAULTS="1")
    through = joined + timedelta(seconds=8)
    for sid in ids:
        assert_one_row_per_occurrence(site, sid, None)
    assert "occ-b" not in nodes_firing(site, c_stands_by, killed_at + timedelta(seconds=6))
    for sid in ids:
        if left_running(site, sid):
            assert_skipped_for(site, sid, joined)
        else:
            assert site.sql(
                RUNS + f" AND scheduled_for > %s AND status IN {among(list(RAN))}",
                sid,
                through,
                *RAN,
            ), (sid, site.sql(DIAGNOSIS, sid, through))


def test_a_node_joining_gives_nothing_to_a_late_node_and_nothing_is_folded(
    site: Site,
) -> None:
    """Heartbeats every second: ``occ-b`` is paused (SIGSTOP: it keeps its database
    sessions, so it is late, not gone), its heartbeat is late two seconds later
    (``NODE_TIMEOUT`` is 30 s), and ``occ-c`` joins then. No schedule is given back to
    ``occ-b``: from ``occ-c``'s start on, every occurrence runs at its time."""
    ids, _c_stands_by = schedules_with(site, 12, 2)
    env = {"HTASK_CLUSTER_NODE_TIMEOUT": "30"}
    a, killed_at = kill_b(site, ids, signal.SIGSTOP, **env)
    wait_until(lambda: now(site) > killed_at + timedelta(seconds=4), 10, "occ-b late")
    joined = run_c(site, a, 12, **env)
    assert site.one("SELECT stopped_at FROM django_htask_node WHERE id = 'occ-b'") is None
    held = [sid for sid in ids if left_running(site, sid)]
    for sid in ids:
        if sid in held:
            assert_skipped_for(site, sid, joined)
        assert_one_row_per_occurrence(site, sid, None if sid in held else joined + STEP * 4)
    not_run = site.sql(
        "SELECT schedule_id, scheduled_for, status, error FROM django_htask_run "
        "WHERE scheduled_for > %s AND status NOT IN ('running', 'succeeded')"
        + (f" AND schedule_id NOT IN {among(held)}" if held else ""),
        joined,
        *held,
    )
    assert not not_run, not_run
    assert "occ-b" not in nodes_firing(site, ids, killed_at + timedelta(seconds=1))


def two_nodes_firing(site: Site, count: int) -> tuple[list[int], dict[str, Scheduler]]:
    """``count`` schedules (more if ``occ-b`` would own none) fired by ``occ-a`` and
    ``occ-b`` (the cluster tests' timings: heartbeats every second, ``NODE_TIMEOUT``
    6 s), once each node fires its share."""
    two = Partition("occ-a", ["occ-a", "occ-b"])
    ids = schedules(site, count)
    while not any(two.owner(sid) == "occ-b" for sid in ids):
        ids += schedules(site, 1, offset=len(ids))
    nodes = {name: site.node("--node-id", name) for name in ("occ-a", "occ-b")}
    wait_until(
        lambda: all(holder_of(site, sid) == two.owner(sid) for sid in ids), 30, "both firing"
    )
    return ids, nodes


def test_each_occurrence_has_one_row_when_a_node_is_paused(site: Site) -> None:
    """``occ-b`` frozen (SIGSTOP: a VM paused, a swap storm) for 4 s, less than
    ``NODE_TIMEOUT``: its standby fires its schedules while its heartbeat is late, and
    once it resumes it fires none of those occurrences again, and goes on."""
    ids, nodes = two_nodes_firing(site, 6)
    paused_at = now(site)
    nodes["occ-b"].process.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: now(site) > paused_at + timedelta(seconds=4), 10, "4 s")
    finally:
        nodes["occ-b"].process.send_signal(signal.SIGCONT)
    resumed = now(site)
    wait_until(lambda: now(site) > resumed + timedelta(seconds=8), 20, "8 s more")
    for sid in ids:
        assert_one_row_per_occurrence(site, sid, resumed + STEP * 2)
    assert "occ-a" in nodes_firing(site, ids, paused_at + STEP * 2)  # the standby fired
    assert all(node.process.poll() is None for node in nodes.values())


def one_row_per_occurrence_across_a_restart(site: Site, restart: Callable[[], None]) -> None:
    """Two nodes fire schedules ``@every 2s`` (the default overlap and catch-up), and
    ``restart()`` takes the database down for 5 s: no occurrence is without a row or
    has two, some fell in the outage (folded, with their rows), and both nodes go on.
    The tests of each database's restart call it (test_acceptance.py,
    test_mariadb_nodes.py)."""
    site.sql("DELETE FROM django_htask_run")
    site.sql("DELETE FROM django_htask_schedule")
    nodes: dict[str, Scheduler] = {}
    try:
        ids, nodes = two_nodes_firing(site, 4)
        restart()
        back = now(site)
        wait_until(lambda: now(site) > back + timedelta(seconds=8), 30, "8 s more")
        folded = sum(
            assert_one_row_per_occurrence(site, sid, back + timedelta(seconds=4)) for sid in ids
        )
        assert all(node.process.poll() is None for node in nodes.values())
        assert folded >= 1  # the outage was felt: 2 occurrences or more fell in it
    finally:
        for node in nodes.values():
            node.send(signal.SIGTERM)
            node.wait_exit(30)
            for stream in (node.process.stdout, node.process.stderr):
                if stream is not None:
                    stream.close()
    print(f"{len(ids)} schedules, {folded} occurrences not run, each with its row")


#: Where in its second the node firing an ``@every 1s`` schedule of runs of 0.4 s is
#: killed: as its claim commits, in the middle of its run, as its run ends (its end not
#: yet written, or just written).
KILL_POINTS = (0.01, 0.2, 0.42)
HOLD = "tests.cluster.clusterapp.tasks:hold"


def kill_in_cycle(site: Site, sid: int, node: Scheduler, point: float) -> datetime:
    """Kill ``node`` (SIGKILL) ``point`` seconds after an occurrence of ``sid`` is
    due; return when (the server's time)."""
    due: datetime = site.one("SELECT next_run_at FROM django_htask_schedule WHERE id = %s", sid)
    at = due.timestamp() + point
    while at < time.time() + 0.3:
        at += 1.0
    time.sleep(at - time.time())
    node.process.send_signal(signal.SIGKILL)
    killed_at = now(site)
    node.wait_exit()
    return killed_at


def test_a_node_killed_anywhere_in_its_cycle_leaves_one_row_per_occurrence(
    site: Site,
) -> None:
    """Three nodes fire an ``@every 1s`` schedule of runs of 0.4 s (``overlap="skip"``);
    the node firing it is killed at a point of its second (:data:`KILL_POINTS`), and a
    fourth node joins 3 s later; three times. Every occurrence keeps exactly one row,
    the schedule runs again within 10 s of each kill, and each run a killed node left
    going is failed as lost, well before ``NODE_TIMEOUT`` (30 s here): a killed node is
    declared dead once its heartbeat is late and its database session gone, where a
    run it left would otherwise have the schedule skipped until ``NODE_TIMEOUT``."""
    env = {"HTASK_CLUSTER_NODE_TIMEOUT": "30"}
    sid = site.schedule("cycle", "@every 1s", HOLD, 0.4)
    nodes = {name: site.node("--node-id", name, **env) for name in ("k-a", "k-b", "k-c")}
    wait_until(lambda: holder_of(site, sid) is not None, 30, "the schedule running")
    killed: list[str] = []
    for n, point in enumerate(KILL_POINTS):
        time.sleep(1.5)  # the members settled: the owner fires it
        victim = holder_of(site, sid)
        assert victim is not None and victim not in killed
        killed_at = kill_in_cycle(site, sid, nodes[victim], point)
        killed.append(victim)
        time.sleep(3.0)
        nodes[f"k-{n}"] = site.spawn("--node-id", f"k-{n}", **env)
        within = killed_at + timedelta(seconds=10)
        wait_until(lambda within=within: now(site) > within, 20, "10 s after the kill")
        ran = site.one(
            "SELECT MIN(started_at) FROM django_htask_run WHERE schedule_id = %s "
            f"AND scheduled_for > %s AND status IN {among(list(RAN))}",
            sid,
            killed_at,
            *RAN,
        )
        assert ran is not None and ran <= within, (point, site.sql(DIAGNOSIS, sid, killed_at))
        assert_one_row_per_occurrence(site, sid, None, step=timedelta(seconds=1))
    left = site.sql(
        "SELECT node, status, error FROM django_htask_run WHERE schedule_id = %s "
        f"AND node IN {among(killed)} AND status NOT IN ('succeeded', 'skipped')",
        sid,
        *killed,
    )
    assert all(s == "failed" and "stopped answering" in e for _n, s, e in left), left
