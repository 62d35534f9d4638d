"""Queue filters and the partition of schedules by queue (pure Python, no database)."""

from __future__ import annotations

import pytest

from django_htask.partition import Partition
from django_htask.queues import ALL, NONE, QueueFilter


@pytest.mark.parametrize(
    ("only", "exclude", "spec", "served", "not_served"),
    [
        ([], [], "*", ["default", "emails"], []),
        (["*"], [], "*", ["default"], []),
        (["emails", "reports"], [], "emails,reports", ["emails", "reports"], ["default"]),
        ([], ["slow"], "*,-slow", ["default", "emails"], ["slow"]),
        (["*"], ["slow", "big"], "*,-big,-slow", ["default"], ["big", "slow"]),
    ],
)
def test_a_filter_serves_what_it_says_and_reads_back_from_its_text(
    only: list[str], exclude: list[str], spec: str, served: list[str], not_served: list[str]
) -> None:
    queues = QueueFilter.of(only, exclude)
    assert str(queues) == spec
    assert QueueFilter.parse(spec) == queues
    assert all(queues.serves(q) for q in served)
    assert not any(queues.serves(q) for q in not_served)


def test_none_serves_nothing_and_all_everything() -> None:
    assert str(NONE) == "" and QueueFilter.parse("") == NONE
    assert not NONE.serves("default")
    assert ALL.serves_all and ALL.serves("anything")


def test_excluding_needs_every_queue_served() -> None:
    with pytest.raises(ValueError, match="--exclude-queue can only be used when every queue"):
        QueueFilter.of(["default", "queue-1"], ["queue-1"])


@pytest.mark.parametrize("bad", ["", "a,b", "*x", "-a", " a", "x" * 101])
def test_a_bad_queue_name_is_named(bad: str) -> None:
    with pytest.raises(ValueError, match="a queue name must be"):
        QueueFilter.of([bad])


def test_each_schedule_is_shared_only_among_the_nodes_serving_its_queue() -> None:
    members = {"a": ALL, "b": QueueFilter.of(["emails"]), "c": QueueFilter.of([], ["emails"])}
    views = {m: Partition(m, members) for m in members}
    for schedule_id in range(500):
        for queue, eligible in (("emails", {"a", "b"}), ("default", {"a", "c"})):
            owners = {m for m, p in views.items() if p.role(schedule_id, queue) == ""}
            standbys = {m for m, p in views.items() if p.role(schedule_id, queue)}
            assert len(owners) == 1 and owners <= eligible
            assert len(standbys) == 1 and standbys <= eligible - owners
            assert views["a"].owner(schedule_id, queue) in owners
    assert Partition("b", members).owner(1, "reports") == "a"  # only a serves reports
    assert Partition("x", {"x": NONE}).role(1) is None  # a node serving no schedule


def test_a_node_alone_owns_what_it_serves() -> None:
    alone = Partition("solo", [], QueueFilter.of(["emails"]))
    assert alone.role(7, "emails") == "" and alone.role(7, "default") is None
