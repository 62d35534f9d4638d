"""``runscheduler --processes N``'s parent (:mod:`django_htask.management.forked`), with
real processes: a driver process (a fresh interpreter: pytest's has threads, and a fork
copies none of them) runs :class:`Forked` over stand-in nodes that log what befalls them
to a file; the test signals and kills them from outside, as an operator would."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

#: The driver: ``python -c DRIVER SCENARIO LOG``. A stand-in node logs ``start SLOT PID
#: FROZEN`` (the objects the garbage collector leaves alone, inherited frozen),
#: says it started (or, in ``fail_at_start``, node 1 exits 1 first, once node 0 has
#: logged its start), then waits for SIGTERM or for its parent to go and logs
#: ``stop SLOT PID term|orphaned``; in ``finite`` each ends by itself at once.
DRIVER = """
import gc, os, signal, sys, time
from django_htask.management.forked import Forked

scenario, log = sys.argv[1], sys.argv[2]

def write(line):
    with open(log, "a") as f:
        f.write(line + "\\n")

def node(slot, ready):
    asked = []
    signal.signal(signal.SIGTERM, lambda *a: asked.append(1))
    write(f"start {slot} {os.getpid()} {gc.get_freeze_count()}")
    if scenario == "fail_at_start" and slot == 1:
        # Not before node 0 took SIGTERM (it logs its start after): killed by the
        # default action before that, it would log no stop.
        while not any(l.startswith("start 0 ") for l in open(log)):
            time.sleep(0.01)
        return 1
    ready()
    if scenario == "finite":
        return 0
    while not asked and not forked.orphaned():
        time.sleep(0.01)
    write(f"stop {slot} {os.getpid()} {'term' if asked else 'orphaned'}")
    return 0

forked = Forked(2, node, finite=scenario == "finite", min_uptime=0.5, write=write)
status = forked.run()
write(f"parent {status} {forked.forked}")
sys.exit(status)
"""


class Group:
    """A driver process and its log."""

    def __init__(self, scenario: str, log: Path) -> None:
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-c", DRIVER, scenario, str(log)],
            start_new_session=True,  # a group of its own, as a terminal's job is
            cwd=Path(__file__).resolve().parents[2],
        )

    def lines(self) -> list[list[str]]:
        try:
            return [line.split() for line in self.log.read_text().splitlines()]
        except FileNotFoundError:
            return []

    def started(self) -> dict[int, int]:
        """Pid -> slot of the stand-ins that logged their start."""
        return {int(p[2]): int(p[1]) for p in self.lines() if p[0] == "start"}

    def wait_for(self, what: Callable[[], bool], reason: str) -> None:
        deadline = time.monotonic() + 30
        while not what():
            assert time.monotonic() < deadline, f"waited 30 s for {reason}: {self.lines()}"
            time.sleep(0.02)

    def exit(self) -> int:
        return self.process.wait(30)


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Callable[[str], Group]]:
    made: list[Group] = []

    def make(scenario: str) -> Group:
        made.append(Group(scenario, tmp_path / "log"))
        return made[-1]

    yield make
    for g in made:
        if g.process.poll() is None:
            g.process.kill()
            g.process.wait()
        for pid in g.started():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_sigterm_to_the_parent_stops_every_node_process_once(
    group: Callable[[str], Group],
) -> None:
    g = group("run")
    g.wait_for(lambda: len(g.started()) == 2, "two node processes")
    g.process.send_signal(signal.SIGTERM)
    assert g.exit() == 0
    stops = sorted((p[1], p[3]) for p in g.lines() if p[0] == "stop")
    assert stops == [("0", "term"), ("1", "term")]
    assert g.lines()[-1] == ["parent", "0", "2"]


def test_ctrl_c_to_the_whole_group_stops_every_node_process_once(
    group: Callable[[str], Group],
) -> None:
    """A terminal's Ctrl-C sends SIGINT to every process of the job: the node processes
    leave it to the parent, whose SIGTERM is the first stop each of them sees (taken by
    a stand-in too, it would end it with KeyboardInterrupt)."""
    g = group("run")
    g.wait_for(lambda: len(g.started()) == 2, "two node processes")
    os.killpg(g.process.pid, signal.SIGINT)
    assert g.exit() == 0
    stops = sorted((p[1], p[3]) for p in g.lines() if p[0] == "stop")
    assert stops == [("0", "term"), ("1", "term")]
    assert g.lines()[-1] == ["parent", "0", "2"]


def test_a_node_process_killed_is_replaced_in_its_slot(group: Callable[[str], Group]) -> None:
    g = group("run")
    g.wait_for(lambda: len(g.started()) == 2, "two node processes")
    victim = next(pid for pid, slot in g.started().items() if slot == 1)
    os.kill(victim, signal.SIGKILL)
    g.wait_for(lambda: len(g.started()) == 3, "a third node process")
    assert sorted(g.started().values()) == [0, 1, 1]  # slot 1 twice: the victim, then another
    g.process.send_signal(signal.SIGTERM)
    assert g.exit() == 0
    stopped = {int(p[2]) for p in g.lines() if p[0] == "stop"}
    assert victim not in stopped and len(stopped) == 2
    assert g.lines()[-1] == ["parent", "0", "3"]


def test_a_node_process_that_fails_before_its_node_started_stops_the_group(
    group: Callable[[str], Group],
) -> None:
    g = group("fail_at_start")
    assert g.exit() == 1
    assert [p[1] for p in g.lines() if p[0] == "start"].count("1") == 1  # not restarted
    assert [(p[1], p[3]) for p in g.lines() if p[0] == "stop"] == [("0", "term")]
    assert g.lines()[-1] == ["parent", "1", "2"]


def test_node_processes_that_end_by_themselves_are_not_replaced(
    group: Callable[[str], Group],
) -> None:
    g = group("finite")
    assert g.exit() == 0
    assert g.lines()[-1] == ["parent", "0", "2"]


def test_node_processes_inherit_the_parents_objects_frozen(
    group: Callable[[str], Group],
) -> None:
    """What the set-up process held is frozen before each fork: a node process's full
    collections leave it alone, and the pages holding it stay shared."""
    g = group("finite")
    assert g.exit() == 0
    frozen = [int(p[3]) for p in g.lines() if p[0] == "start"]
    assert len(frozen) == 2
    assert all(count > 1000 for count in frozen), frozen


def test_node_processes_stop_when_their_parent_is_killed(group: Callable[[str], Group]) -> None:
    g = group("run")
    g.wait_for(lambda: len(g.started()) == 2, "two node processes")
    g.process.kill()
    g.process.wait()
    g.wait_for(
        lambda: sorted(p[3] for p in g.lines() if p[0] == "stop") == ["orphaned", "orphaned"],
        "both to see their parent gone",
    )
