"""Several nodes in one process on PostgreSQL and on MariaDB, driven by the engine's
fake clock. On MariaDB there is no NOTIFY: where a PostgreSQL node hears of a node
joining or leaving at once, a MariaDB node hears of it at its next heartbeat
(:func:`hear_of_members`); the guarantees tested are the same."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import OperationalError, connection

from django_htask.engine import FakeClock
from django_htask.models import Node, Run, RunStatus, Schedule
from django_htask.partition import Partition
from django_htask.store.database import unavailable
from tests.conftest import pass_vendor
from tests.integration.testapp import tasks

pytestmark = [pytest.mark.postgres, pytest.mark.mariadb, pytest.mark.django_db(transaction=True)]

ADD = "tests.integration.testapp.tasks:add"
SLOW = "tests.integration.testapp.tasks:slow"
MakeNode = Callable[..., Any]
HEARTBEAT = 10.0  # the default HEARTBEAT_INTERVAL


def make_schedules(n: int, text: str = "@every 1h", function: str = ADD, **kw: Any) -> list[int]:
    ids = []
    prefix = kw.get("queue_name", "")
    for i in range(n):
        row = Schedule(name=f"{prefix}s{i}", function=function, schedule=text, **kw)
        row.set_call((i,) if function == ADD else ("x",))
        row.save()
        ids.append(row.pk)
    return ids


def wait_for(condition: Callable[[], object], timeout: float = 10.0) -> None:
    """Poll (real time) until ``condition()``: for the listener thread."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def start(make_node: MakeNode, node_id: str, *, settle: bool = True, **kwargs: Any) -> Any:
    node = make_node(node_id=node_id, start=settle, **kwargs)
    if not settle:  # another node's job is blocked: advance(0) would wait for it
        node.start()
    if connection.vendor == "postgresql":  # MariaDB's nodes listen to nothing: they poll
        assert node.membership.wait_listening()
    return node


def hear_of_members(fake_clock: FakeClock, *, wait: bool = True) -> float:
    """Let the nodes hear that a node joined or left: on PostgreSQL a notification
    tells them at once (nothing to do here); on MariaDB they read the members at their
    next heartbeat. Return the seconds the clock moved."""
    if connection.vendor != "mysql":
        return 0.0
    fake_clock.advance(HEARTBEAT, wait=wait)
    return HEARTBEAT


def advance_beat_by_beat(fake_clock: FakeClock, seconds: float, *nodes: Any) -> None:
    """``fake_clock.advance(seconds, wait=False)`` (a node's job is blocked: waiting
    would wait for it), one heartbeat interval at a time, each step waiting (real time)
    until every node of ``nodes`` has beaten in it. In one jump, one node's heartbeat
    thread could beat for each interval passed before another's beat once; the first
    then saw the other as late and took its schedules back (1 run in 20): a race of
    the test, for in real time no node's heartbeats fall intervals behind another's."""
    ids = [node.node_id for node in nodes]
    left = seconds
    while left >= HEARTBEAT:
        before = fake_clock.now()
        fake_clock.advance(HEARTBEAT, wait=False)
        left -= HEARTBEAT
        beaten = Node.objects.filter(id__in=ids, last_heartbeat__gt=before)
        wait_for(lambda: beaten.count() == len(ids))  # noqa: B023 - called at once
    fake_clock.advance(left, wait=False)


def from_another_client(other_client: Callable[..., Any], sql: str, params: list[Any]) -> None:
    """Run ``sql`` in autocommit on a connection of another client (psycopg's on
    PostgreSQL, mysqlclient's on MariaDB)."""
    if connection.vendor != "mysql":
        other_client().execute(sql, params)
        return
    from tests.mariadbcluster import connect

    conn = connect(connection.settings_dict)
    try:
        conn.cursor().execute(sql, params)
    finally:
        conn.close()


def held(*nodes: Any) -> list[set[int]]:
    """The schedules each node owns (it also stands by for others: ``placed_schedules``)."""
    return [set(n.owned_schedules()) for n in nodes]


def test_each_node_holds_only_its_share(make_node: MakeNode, fake_clock: FakeClock) -> None:
    ids = make_schedules(60)
    a = start(make_node, "node-a")
    assert held(a) == [set(ids)]  # alone: everything
    b = start(make_node, "node-b")
    c = start(make_node, "node-c")
    members = ("node-a", "node-b", "node-c")
    assert held(c) == [{i for i in ids if Partition("node-c", members).owns(i)}]
    # a and b hear of the others joining and hand over at their next heartbeat
    hear_of_members(fake_clock)
    wait_for(lambda: a.membership.members == members and b.membership.members == members)
    ha, hb, hc = held(a, b, c)
    assert ha | hb | hc == set(ids)  # overlapping while handing over, no gap
    assert len(ha) + len(hb) + len(hc) > len(ids)
    fake_clock.advance(HEARTBEAT)
    ha, hb, hc = held(a, b, c)
    assert ha | hb | hc == set(ids)
    assert not (ha & hb or ha & hc or hb & hc)
    assert all(len(h) >= 5 for h in (ha, hb, hc))
    assert hb == {i for i in ids if Partition("node-b", members).owns(i)}


def test_a_stopped_nodes_share_is_taken_over(make_node: MakeNode, fake_clock: FakeClock) -> None:
    ids = make_schedules(40)
    a = start(make_node, "node-a")
    b = start(make_node, "node-b")
    hear_of_members(fake_clock)
    fake_clock.advance(HEARTBEAT)  # a hands b's share over
    assert held(a)[0] != set(ids)
    b.stop(timeout=5)
    hear_of_members(fake_clock)
    wait_for(lambda: a.membership.members == ("node-a",))
    # The control thread sets the members, then reads the schedules it gained: wait for
    # that read too (on PostgreSQL no clock advance: the notification alone brings b's
    # share to a).
    wait_for(lambda: held(a) == [set(ids)])


def test_a_dead_nodes_share_is_taken_over_after_the_node_timeout(
    make_node: MakeNode, fake_clock: FakeClock
) -> None:
    ids = make_schedules(40)
    a = start(make_node, "node-a")
    Node.objects.create(
        id="node-dead", hostname="h", pid=1, version="0",
        started_at=fake_clock.now(), last_heartbeat=fake_clock.now(),
    )  # fmt: skip
    fake_clock.advance(HEARTBEAT)
    fake_clock.advance(HEARTBEAT)
    assert held(a)[0] == {i for i in ids if Partition("node-a", ["node-a", "node-dead"]).owns(i)}
    fake_clock.advance(60)  # no heartbeat from node-dead: it is dead
    assert held(a) == [set(ids)]
    assert Node.objects.get(id="node-dead").stopped_at is not None


def test_a_rebalance_that_could_not_read_the_schedules_reads_them_later(
    make_node: MakeNode, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The members changed but reading the schedules failed (the database restarting):
    the read is owed until it succeeds. The dead node's schedules do not change while
    nobody fires them, so no sync would ever bring them in."""
    ids = make_schedules(40)
    a = start(make_node, "node-a")
    Node.objects.create(
        id="node-dead", hostname="h", pid=1, version="0",
        started_at=fake_clock.now(), last_heartbeat=fake_clock.now(),
    )  # fmt: skip
    fake_clock.advance(HEARTBEAT)
    fake_clock.advance(HEARTBEAT)
    assert held(a)[0] == {i for i in ids if Partition("node-a", ["node-a", "node-dead"]).owns(i)}
    load, failed = a.store.load_schedules, []

    def load_or_fail_once() -> Any:
        if not failed:
            failed.append(fake_clock.now())
            raise OperationalError("the database system is shutting down")
        return load()

    monkeypatch.setattr(a.store, "load_schedules", unavailable(load_or_fail_once))
    fake_clock.advance(60)  # node-dead is dead: the rebalance's read fails, then succeeds
    assert failed
    assert held(a) == [set(ids)]


def test_a_claim_lost_to_a_version_change_fires_all_the_same(
    make_node: MakeNode, fake_clock: FakeClock, other_client: Callable[..., Any], calls: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Another node writes the schedule's status (its record() of an earlier run)
    between this node's read and its compare-and-set: the claim is lost to the version
    alone, the due time is unchanged, and the schedule must be armed again, not left
    with the timer that just fired."""
    (sid,) = make_schedules(1, text="@every 1m")
    node = start(make_node, "node-a")
    read, touched = node.store.get_schedule, []

    def read_then_touch(schedule_id: int) -> Any:
        row = read(schedule_id)
        if not touched:
            touched.append(schedule_id)
            from_another_client(
                other_client,
                "UPDATE django_htask_schedule SET last_status = 'succeeded' WHERE id = %s",
                [schedule_id],
            )
        return row

    monkeypatch.setattr(node.store, "get_schedule", read_then_touch)
    fake_clock.advance(60)
    assert touched
    assert Run.objects.filter(schedule_id=sid).count() == 1
    fake_clock.advance(60)
    assert Run.objects.filter(schedule_id=sid).count() == 2
    assert calls["add"] == [0, 0]


def test_the_heartbeat_goes_on_while_the_control_thread_is_busy_until_it_is_stuck(
    make_node: MakeNode, fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A control thread with a long queue must not get its node declared dead (its
    running tasks reaped and run again elsewhere); one stuck in a single call for a
    whole NODE_TIMEOUT must stop renewing, so that the others take its work over."""
    node = start(make_node, "node-a")
    timeout = node.settings.node_timeout
    entered, gate = threading.Event(), threading.Event()

    def stuck() -> None:
        entered.set()
        gate.wait(60)

    node.parts.ctx.control.scheduler.call_soon(stuck)
    try:
        wait_for(entered.is_set)
        beats = 0
        while beats * HEARTBEAT <= timeout:  # busy, but not for a whole timeout yet
            fake_clock.advance(HEARTBEAT, wait=False)
            beats += 1
            wait_for(lambda: Node.objects.get(id="node-a").last_heartbeat == fake_clock.now())
        renewed = fake_clock.now()
        fake_clock.advance(HEARTBEAT, wait=False)
        wait_for(lambda: "leases not renewed" in caplog.text)
        assert Node.objects.get(id="node-a").last_heartbeat == renewed
    finally:
        gate.set()
    fake_clock.advance(HEARTBEAT)  # the control thread moves again: so does the heartbeat
    assert Node.objects.get(id="node-a").last_heartbeat == fake_clock.now()


@pytest.mark.skipif(
    pass_vendor() == "mysql",
    reason="MariaDB has no NOTIFY: a node sees another client's change at its next poll "
    "(docs/cluster.md, On MySQL and MariaDB)",
)
def test_a_change_from_another_client_wakes_the_node(
    make_node: MakeNode, fake_clock: FakeClock, other_client: Callable[..., Any]
) -> None:
    (sid,) = make_schedules(1)
    node = start(make_node, "node-a", poll_interval=3600)  # only a notification can do it
    soon = fake_clock.now() + timedelta(seconds=5)
    other_client().execute(
        "UPDATE django_htask_schedule SET next_run_at = %s WHERE id = %s", [soon, sid]
    )
    wait_for(lambda: node.placed_schedules().get(sid) == soon, timeout=2)
    other_client().execute(
        "INSERT INTO django_htask_task (token, function, payload, run_at, status, attempts, "
        "max_attempts, last_error, traceback, created_at) VALUES "
        "('t1', %s, '', %s, 'pending', 0, 1, '', '', now())",
        [ADD, soon],
    )
    wait_for(lambda: node.next_task_wake() == soon, timeout=2)


def test_each_occurrence_fires_once_while_two_nodes_hold_a_schedule(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    ids = make_schedules(20, text="@every 1m")
    a = start(make_node, "node-a")
    b = start(make_node, "node-b")
    hear_of_members(fake_clock)  # on MariaDB 10 s: no occurrence yet (the first at 60 s)
    wait_for(lambda: a.membership.members == ("node-a", "node-b"))
    assert held(a) == [set(ids)]  # handing over: b's share is held by both
    assert held(b)[0] and held(b)[0] < set(ids)
    fake_clock.advance(60)
    fake_clock.advance(60)
    runs = list(Run.objects.values_list("schedule_id", "scheduled_for", "node"))
    assert len(runs) == 40
    assert len({(s, f) for s, f, _ in runs}) == 40  # none doubled
    assert {n for _, _, n in runs} == {"node-a", "node-b"}
    assert sorted(calls["add"]) == sorted(list(range(20)) * 2)


def _node_that_gets(schedule_id: int, first: str) -> str:
    for i in range(100):
        name = f"node-{i}"
        if Partition(name, [first, name]).owner(schedule_id) == name:
            return name
    raise AssertionError("no name found")


@pytest.mark.parametrize("overlap", ["skip", "delay"])
def test_overlap_holds_across_nodes(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any, overlap: str
) -> None:
    (sid,) = make_schedules(1, text="@every 1m", function=SLOW, overlap=overlap)
    a = start(make_node, "node-a")
    fake_clock.advance(60, wait=False)
    wait_for(lambda: len(calls["slow-start"]) == 1)  # running on a, blocked
    b = start(make_node, _node_that_gets(sid, "node-a"), settle=False)
    assert sid in b.placed_schedules()
    heard = hear_of_members(fake_clock, wait=False)
    wait_for(lambda: len(a.membership.members) == 2)
    fake_clock.advance(HEARTBEAT, wait=False)
    wait_for(lambda: sid not in a.owned_schedules())  # handed over to b (a stands by)
    # the next occurrence, b's: exactly at its time (a's standby timer is 2 s later)
    advance_beat_by_beat(fake_clock, 60 - HEARTBEAT - heard, a, b)
    if overlap == "skip":
        wait_for(lambda: Run.objects.filter(status=RunStatus.SKIPPED).exists())
        skipped = Run.objects.get(status=RunStatus.SKIPPED)
        assert skipped.node == b.node_id
        tasks.gate.set()
        wait_for(lambda: len(calls["slow-end"]) == 1)
        fake_clock.advance(0)
        assert calls["slow-start"] == ["x"]
    else:
        time.sleep(0.3)  # give a wrong implementation the chance to start it on b
        assert len(calls["slow-start"]) == 1
        tasks.gate.set()
        wait_for(lambda: len(calls["slow-end"]) == 1)
        fake_clock.advance(0)
        wait_for(lambda: not Run.objects.filter(status=RunStatus.RUNNING, node="node-a").exists())
        fake_clock.advance(b.poll_interval, wait=False)  # b looks again: a is done
        wait_for(lambda: len(calls["slow-end"]) == 2)
        fake_clock.advance(0)
        first, second = Run.objects.filter(schedule_id=sid).order_by("started_at")
        assert (first.node, second.node) == ("node-a", b.node_id)
        assert first.finished_at is not None and second.started_at is not None
        assert second.started_at >= first.finished_at


def test_schedules_are_shared_only_among_the_nodes_serving_their_queue(
    make_node: MakeNode, fake_clock: FakeClock
) -> None:
    from django_htask.queues import QueueFilter

    ids = make_schedules(30, queue_name="emails") + make_schedules(30, queue_name="default")
    emails = ids[:30]
    a = start(make_node, "node-a", queues=QueueFilter.of(["emails"]))
    b = start(make_node, "node-b", queues=QueueFilter.of([], ["emails"]))
    hear_of_members(fake_clock)
    wait_for(lambda: a.membership.members == ("node-a", "node-b"))
    fake_clock.advance(HEARTBEAT)
    assert held(a) == [set(emails)]  # the only node serving emails: owns all of them
    assert set(a.placed_schedules()) == set(emails)  # and stands by for nothing else
    assert held(b) == [set(ids) - set(emails)]
