"""Rendezvous partitioning of schedules over the live nodes (no database)."""

from __future__ import annotations

from collections import Counter

from django_htask.partition import Partition

IDS = range(1, 30_001)


def owners(members: list[str]) -> dict[int, str]:
    partitions = [Partition(m, members) for m in members]
    result: dict[int, str] = {}
    for schedule_id in IDS:
        holders = [p.node_id for p in partitions if p.owns(schedule_id)]
        assert len(holders) == 1, (schedule_id, holders)
        result[schedule_id] = holders[0]
    return result


def test_each_schedule_has_exactly_one_owner_and_shares_are_even() -> None:
    members = ["a", "b", "c"]
    owned = owners(members)
    assert all(Partition("a", members).owner(i) == owned[i] for i in IDS[:500])
    counts = Counter(owned.values())
    assert set(counts) == set(members)
    assert all(abs(n - len(IDS) / 3) < len(IDS) * 0.02 for n in counts.values()), counts


def test_a_node_joining_takes_only_its_share_from_the_others() -> None:
    before = owners(["a", "b", "c"])
    after = owners(["a", "b", "c", "d"])
    moved = [i for i in IDS if before[i] != after[i]]
    assert all(after[i] == "d" for i in moved)  # nothing moves between a, b and c
    assert abs(len(moved) - len(IDS) / 4) < len(IDS) * 0.02


def test_a_node_leaving_gives_away_only_what_it_held() -> None:
    before = owners(["a", "b", "c"])
    after = owners(["a", "c"])
    assert all(before[i] == "b" for i in IDS if before[i] != after[i])


def test_a_single_node_owns_everything_and_joins_its_own_member_list() -> None:
    alone = Partition("a", [])
    assert alone.members == ("a",)
    assert all(alone.owns(i) for i in IDS[:100])
    assert Partition("x", ["b", "a"]).members == ("a", "b", "x")
