"""The timetable: keyed entries, those due at one instant sharing one timer."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from django_htask.engine import FakeClock, Scheduler, SchedulerFull, Timetable

from .conftest import START


@pytest.fixture
def fired() -> list[list[tuple[str, int]]]:
    return []


@pytest.fixture
def sched(clock: FakeClock) -> Iterator[Scheduler]:
    with Scheduler(workers=1, clock=clock, capacity=3) as scheduler:
        yield scheduler


@pytest.fixture
def table(sched: Scheduler, fired: list[list[tuple[str, int]]]) -> Timetable[str, int]:
    return Timetable(sched, fired.append)


def test_entries_due_at_one_instant_share_one_timer_and_fire_together_in_order(
    clock: FakeClock, sched: Scheduler, table: Timetable[str, int], fired: list[object]
) -> None:
    at = START + timedelta(seconds=10)
    for n, key in enumerate(["c", "a", "b"]):
        table.place(key, at, n)
    table.place("later", at + timedelta(seconds=1), 9)
    assert len(sched) == 2  # two instants, two timers
    assert (len(table), table.get("a"), "b" in table) == (4, 1, True)
    clock.advance(10)
    assert fired == [[("c", 0), ("a", 1), ("b", 2)]]
    assert len(table) == 1 and "a" not in table  # taken out: placing again is the caller's
    clock.advance(1)
    assert fired[-1] == [("later", 9)]


def test_moving_or_dropping_the_last_entry_of_an_instant_cancels_its_timer(
    clock: FakeClock, sched: Scheduler, table: Timetable[str, int], fired: list[object]
) -> None:
    at = START + timedelta(seconds=5)
    table.place("x", at, 1)
    table.place("x", at + timedelta(seconds=5), 2)  # moved: its old timer is gone
    assert len(sched) == 1
    assert table.drop("x") == 2 and table.drop("x") is None
    assert len(sched) == 0
    clock.advance(20)
    assert fired == []


def test_a_refused_timer_leaves_nothing_held(sched: Scheduler, table: Timetable[str, int]) -> None:
    for n in range(3):  # the scheduler's capacity
        table.place(f"k{n}", START + timedelta(seconds=n + 1), n)
    table.place("k3", START + timedelta(seconds=2), 3)  # joins a timer: room enough
    with pytest.raises(SchedulerFull):
        table.place("new", START + timedelta(seconds=99), 7)
    assert "new" not in table and len(table) == 4


def test_clear_lets_everything_go(
    clock: FakeClock, sched: Scheduler, table: Timetable[str, int], fired: list[object]
) -> None:
    table.place("a", START + timedelta(seconds=1), 1)
    table.place("b", START + timedelta(seconds=2), 2)
    table.clear()
    assert (len(table), len(sched), table.items()) == (0, 0, [])
    clock.advance(5)
    assert fired == []
