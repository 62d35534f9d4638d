"""Locks and limits across real ``runscheduler`` processes on PostgreSQL (issue 25,
item 2): tasks sharing a lock never overlap, ``max_running`` is never exceeded, and a
node killed while it holds a lock lets the lock's other tasks go on within the node
timeout.

The jobs (``tests/cluster/clusterapp/tasks.py``) append ``start``/``end`` lines with
their number, process and wall-clock time to one log file: one machine, one clock."""

from __future__ import annotations

import itertools
import signal
import time

import pytest

from tests.acceptance.conftest import wait_until
from tests.cluster.conftest import Site
from tests.cluster.settings import HTASK

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

KEYS = 3


def spans(site: Site, start: str, end: str) -> list[tuple[int, int, float, float | None]]:
    """The runs in the log: (task number, process, start time, end time or None)."""
    found: list[tuple[int, int, float, float | None]] = []
    going: dict[tuple[int, int], int] = {}  # (number, process) -> its place in found
    for parts in site.lines():
        n, pid, at = int(parts[1]), int(parts[2]), float(parts[3])
        if parts[0] == start:
            going[n, pid] = len(found)
            found.append((n, pid, at, None))
        elif parts[0] == end:
            i = going.pop((n, pid))
            found[i] = (n, pid, found[i][2], at)
    return found


def overlaps(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The intervals that begin before the one before them ended."""
    ordered = sorted(intervals)
    return [b for a, b in itertools.pairwise(ordered) if b[0] < a[1]]


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    now = peak = 0
    for _at, step in events:  # an end sorts before a start at the same instant
        now += step
        peak = max(peak, now)
    return peak


def test_three_nodes_never_overlap_a_lock_nor_exceed_max_running(site: Site) -> None:
    # Two workers each: no node can hold the three locks and both limited slots alone.
    nodes = [site.node("--workers", "2") for _ in range(3)]
    site.django(
        "from django_htask import schedule_many\n"
        "from tests.cluster.clusterapp.tasks import limited, locked\n"
        f"schedule_many([(locked, (n, 0.02), {{}}, None, f'key:{{n % {KEYS}}}')"
        " for n in range(300)])\n"
        "schedule_many([(limited, (n, 0.2), {}) for n in range(20)])\n"
    )
    site.wait_all_succeeded(60)
    runs = spans(site, "lstart", "lend")
    assert sorted(n for n, _p, _s, _e in runs) == list(range(300))
    for key in range(KEYS):
        intervals = [(s, e or s) for n, _p, s, e in runs if n % KEYS == key]
        assert overlaps(intervals) == []
    assert len({pid for _n, pid, _s, _e in runs}) > 1  # the nodes shared the work
    limited_runs = spans(site, "mstart", "mend")
    assert len(limited_runs) == 20
    assert most_at_once([(s, e or s) for _n, _p, s, e in limited_runs]) == 2
    assert all(node.process.poll() is None for node in nodes)


def test_a_node_killed_holding_a_lock_lets_its_other_tasks_go_on_within_node_timeout(
    site: Site,
) -> None:
    nodes = {node.process.pid: node for node in (site.node() for _ in range(3))}
    site.django(
        "from django_htask import schedule\n"
        "from tests.cluster.clusterapp.tasks import locked\n"
        "for n in range(6):\n"
        "    schedule(locked, n, 2.0, lock='k', max_attempts=2)\n"
    )
    wait_until(lambda: spans(site, "lstart", "lend"), 30, "the first task started")
    [(first, holder, _began, _end)] = spans(site, "lstart", "lend")
    nodes[holder].process.send_signal(signal.SIGKILL)
    killed_at = time.time()
    nodes[holder].wait_exit()

    def next_start() -> float | None:
        later = [s for _n, p, s, _e in spans(site, "lstart", "lend") if p != holder]
        return min(later, default=None)

    wait_until(lambda: next_start() is not None, 30, "another node started the lock's next task")
    went_on = (next_start() or 0) - killed_at
    # Noticed dead NODE_TIMEOUT after its last heartbeat (at most one interval before
    # the kill), by a reaper that looks once a heartbeat interval.
    assert went_on <= HTASK["NODE_TIMEOUT"] + 2 * HTASK["HEARTBEAT_INTERVAL"], went_on
    wait_until(
        lambda: (
            not site.sql("SELECT 1 FROM django_htask_task WHERE status IN ('pending', 'running')")
        ),
        60,
        "every task ended",
    )
    runs = spans(site, "lstart", "lend")
    intervals = [(s, killed_at if e is None else e) for _n, _p, s, e in runs]
    assert overlaps(intervals) == []
    assert runs[0] == (first, holder, _began, None)  # cut short by the kill
    assert sorted(n for n, _p, _s, _e in runs) == sorted([first, *range(6)])  # and retried
    print(f"the lock's next task started {went_on:.2f} s after the kill")
