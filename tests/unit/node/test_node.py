"""The node's logic on the in-memory store: firing, misfires, overlap, retries, claims,
leases, reaping, standby, fencing, hand-back at stop. No database, no sleep: the fake
clock moves time, and jobs that must be running wait on events."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast

import pytest

from django_htask.conf import HtaskSettings
from django_htask.engine import FakeClock
from django_htask.enums import RunStatus, TaskStatus
from django_htask.exceptions import StoreUnavailable
from django_htask.node import EXIT_GRACE, Node
from django_htask.node import node as node_module
from django_htask.node.executors import GATHER
from django_htask.node.tasks import TaskDispatch
from django_htask.retry import RetryPolicy
from django_htask.testing import InMemoryStore

from . import jobs
from .conftest import ADD, BOOM, HOLD, START

MakeNode = Callable[..., Node]
SECOND = timedelta(seconds=1)


def statuses(store: InMemoryStore, schedule_id: int) -> list[str]:
    return [r.status for r in store.runs_of(schedule_id=schedule_id)]


# -- schedules ---------------------------------------------------------------------------
def test_a_schedule_fires_at_its_time_and_moves_on(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, calls: Any
) -> None:
    sid = store.add_schedule("s", ADD, "@every 1m", args=(1,))
    node = make_node()
    clock.advance(59)
    assert calls["add"] == []
    clock.advance(1)
    assert calls["add"] == [1]
    [run] = store.runs_of(schedule_id=sid)
    assert (run.status, run.node, run.scheduled_for) == ("succeeded", node.node_id, clock.now())
    assert store.schedules[sid].next_run_at == clock.now() + timedelta(minutes=1)
    assert store.schedules[sid].last_status == "succeeded"


@pytest.mark.parametrize(
    ("catch_up", "grace", "runs", "recorded"),
    [
        ("latest", None, [1], ["skipped"] * 5 + ["succeeded"]),
        ("all", None, [1] * 6, ["succeeded"] * 6),
        ("skip", None, [], ["missed"] * 6),
        ("latest", 30.0, [], ["missed"] * 6),
        ("all", 150.0, [1, 1], ["missed"] * 4 + ["succeeded"] * 2),
    ],
)
def test_misfire_policies(
    make_node: MakeNode,
    clock: FakeClock,
    store: InMemoryStore,
    calls: Any,
    catch_up: str,
    grace: float | None,
    runs: list[int],
    recorded: list[str],
) -> None:
    behind = START - timedelta(minutes=5, seconds=45)  # the node was down
    sid = store.add_schedule(
        "s", ADD, "@every 1m", args=(1,), next_run_at=behind, catch_up=catch_up, grace=grace,
        overlap="allow",
    )  # fmt: skip
    make_node(workers=6)
    assert calls["add"] == runs
    # One row per occurrence due, in the order of the occurrences.
    rows = sorted(store.runs_of(schedule_id=sid), key=lambda r: r.scheduled_for or START)
    assert [r.status for r in rows] == recorded
    assert [r.scheduled_for for r in rows] == [behind + timedelta(minutes=i) for i in range(6)]
    assert store.schedules[sid].next_run_at == START + timedelta(seconds=15)


@pytest.mark.parametrize("catch_up", ["latest", "all", "skip"])
def test_occurrences_past_the_catch_up_limit_share_one_missed_row(
    make_node: MakeNode, store: InMemoryStore, calls: Any, catch_up: str
) -> None:
    from django_htask.conf import HtaskSettings

    behind = START - timedelta(minutes=5, seconds=45)  # 6 occurrences due, 3 the limit
    sid = store.add_schedule(
        "s", ADD, "@every 1m", args=(1,), next_run_at=behind, catch_up=catch_up,
        overlap="allow",
    )  # fmt: skip
    make_node(workers=6, settings=HtaskSettings(catch_up_limit=3))
    rows = sorted(store.runs_of(schedule_id=sid), key=lambda r: r.scheduled_for or START)
    times = [r.scheduled_for for r in rows]
    assert times == [behind + timedelta(minutes=i) for i in range(4)]  # 3, then the rest
    *caught, rest = rows
    assert rest.status == "missed"
    assert rest.error == (
        f"missed: every occurrence from {times[3].isoformat()} to before "  # type: ignore[union-attr]
        f"{(START + timedelta(seconds=15)).isoformat()}, more than 3 occurrences behind "
        "(CATCH_UP_LIMIT)"
    )
    assert len(calls["add"]) == sum(r.status == "succeeded" for r in caught)
    assert store.schedules[sid].next_run_at == START + timedelta(seconds=15)


def test_overlap_skip_and_delay_hold_for_caught_up_occurrences(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore
) -> None:
    behind = START - timedelta(minutes=5, seconds=45)
    skip = store.add_schedule(
        "skip", HOLD, "@every 1m", args=("skip",), next_run_at=behind, catch_up="all"
    )
    delay = store.add_schedule(
        "delay", HOLD, "@every 1m", args=("delay",), next_run_at=behind, catch_up="all",
        overlap="delay",
    )  # fmt: skip
    jobs.running.update(now=0, most=0)
    node = make_node(workers=8, start=False)
    node.start()
    clock.advance(0, wait=False)
    for name in ("skip", "delay"):
        assert jobs.gate(name)[0].wait(5)
    assert statuses(store, skip) == ["skipped"] * 5 + ["running"]
    assert statuses(store, delay) == ["running"]  # the others wait for it
    for name in ("skip", "delay"):
        jobs.gate(name)[1].set()
    clock.advance(0)
    assert statuses(store, delay) == ["succeeded"] * 6  # one after another
    assert jobs.running["most"] == 2  # one of each at a time
    assert statuses(store, skip) == ["skipped"] * 5 + ["succeeded"]


def test_a_failing_schedule_run_is_retried_after_the_backoff(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, calls: Any
) -> None:
    sid = store.add_schedule("b", BOOM, "@every 1h", max_attempts=3, retry_backoff=5.0)
    make_node()
    clock.advance(3600)
    clock.advance(5)
    clock.advance(10)
    runs = store.runs_of(schedule_id=sid)
    assert [(r.status, r.attempt) for r in runs] == [("failed", 1), ("failed", 2), ("failed", 3)]
    assert [r.started_at for r in runs] == [
        START + timedelta(hours=1),
        START + timedelta(hours=1, seconds=5),
        START + timedelta(hours=1, seconds=15),
    ]


def test_a_schedule_the_node_cannot_use_is_broken_once(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, calls: Any
) -> None:
    sid = store.add_schedule("bad", ADD, "@every 1m", args=(1,))
    node = make_node()
    store.update_schedule(sid, catch_up="bogus")
    clock.advance(60)
    clock.advance(600)
    assert store.schedules[sid].broken.startswith("catch_up 'bogus' is not one of")
    assert statuses(store, sid) == ["failed"]
    assert node.placed_schedules() == {}


def test_an_edit_by_another_process_is_seen_within_the_poll_interval(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, calls: Any
) -> None:
    sid = store.add_schedule("s", ADD, "@every 1h", args=(2,))
    node = make_node(poll_interval=2.0)
    soon = START + timedelta(seconds=5)
    store.update_schedule(sid, next_run_at=soon)
    clock.advance(2)
    assert node.placed_schedules() == {sid: soon}
    clock.advance(3)
    assert calls["add"] == [2]


# -- one-off tasks -------------------------------------------------------------------------
def test_tasks_are_claimed_only_as_workers_take_them(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore
) -> None:
    ids = [store.add_task(HOLD, "claims") for _ in range(5)]
    make_node(workers=2, start=False).start()
    clock.advance(0, wait=False)
    assert jobs.gate("claims")[0].wait(5)
    assert sorted(store.tasks[i].status for i in ids) == ["pending"] * 3 + ["running"] * 2
    assert all(store.tasks[i].attempts == 0 for i in ids if store.tasks[i].status == "pending")
    jobs.gate("claims")[1].set()
    clock.advance(0)
    assert {store.tasks[i].status for i in ids} == {TaskStatus.SUCCEEDED}


def tell_on_push(node: Node, told: threading.Condition) -> Any:
    """Notify ``told`` after each result the node's workers push; the results."""
    results = node.parts.ctx.results
    push = results.push

    def push_and_tell(outcome: Any) -> None:
        push(outcome)
        with told:
            told.notify_all()

    results.push = push_and_tell  # type: ignore[method-assign]
    return results


def test_each_claim_is_a_call_of_its_own_on_the_control_thread(
    clock: FakeClock, calls: Any
) -> None:
    """Tasks finishing one by one while the node claims (worker processes' do) never
    keep the control thread in one call: each claim is a call of its own, so its timers
    and the heartbeat's check (``stuck_for``) see it move on. One dispatch used to loop
    while results kept coming, and the heartbeat stopped renewing the leases."""
    jobs.gates.pop("one by one", None)
    node: Node | None = None
    claims: list[int] = []  # the control thread's calls started, at each claim
    pushed = threading.Condition()

    class Claiming(InMemoryStore):
        def start_tasks(self, *args: Any, **kwargs: Any) -> Any:
            assert node is not None
            ctx = node.parts.ctx
            claims.append(ctx.control.scheduler.stats()["fired"])
            started = super().start_tasks(*args, **kwargs)
            if len(claims) == 2:  # the task still running finishes during this claim
                jobs.gate("one by one")[1].set()
                with pushed:
                    assert pushed.wait_for(lambda: not ctx.running, timeout=5)
            return started

    store = Claiming(clock)
    # The first claim takes the held task and the next; that one's end asks for the
    # second claim, during which the held one ends too.
    ids = [store.add_task(HOLD, "one by one"), *(store.add_task(ADD, 1, n) for n in range(4))]
    node = Node(store=store, clock=clock, workers=2, node_id="one")
    try:
        node.start()
        tell_on_push(node, pushed)
        for _ in range(20):
            clock.advance(0)
            if all(store.tasks[i].status == TaskStatus.SUCCEEDED for i in ids):
                break
        assert {store.tasks[i].status for i in ids} == {TaskStatus.SUCCEEDED}
        assert len(claims) >= 3
        assert len(set(claims)) == len(claims)  # no two claims in one call
    finally:
        node.stop(timeout=5)


class _Gathering(TaskDispatch):
    """The dispatch of a node with worker processes (``gather``), on threads."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args[:4], gather=GATHER)


@pytest.mark.parametrize("case", ["all end", "the oldest is old enough", "an older call"])
def test_with_worker_processes_a_round_waits_for_the_calls_just_handed_out(
    monkeypatch: pytest.MonkeyPatch, clock: FakeClock, case: str
) -> None:
    """Two workers, two held calls handed out together: the first one's end does not
    start a round of its own while the other is younger than ``GATHER``. The round
    waits until both have ended (then it claims two at once), or until the oldest is
    ``GATHER`` old; a call already older than that is not waited for."""
    monkeypatch.setattr(node_module, "TaskDispatch", _Gathering)
    a, b = (f"gather {case} {n}" for n in "ab")
    for name in (a, b):
        jobs.gates.pop(name, None)
    claims: list[tuple[int, int]] = []  # (free, started) of each claim
    changed = threading.Condition()

    class Claiming(InMemoryStore):
        def start_tasks(self, *args: Any, **kwargs: Any) -> Any:
            started = super().start_tasks(*args, **kwargs)
            with changed:
                claims.append((args[2], len(started)))
                changed.notify_all()
            return started

    store = Claiming(clock)
    ids = [store.add_task(HOLD, a), store.add_task(HOLD, b)]
    ids += [store.add_task(ADD, 1, n) for n in range(2)]
    node = Node(store=store, clock=clock, workers=2, node_id="gathers")
    try:
        node.start()
        results = tell_on_push(node, changed)
        clock.advance(0, wait=False)
        assert jobs.gate(a)[0].wait(5) and jobs.gate(b)[0].wait(5)
        assert claims == [(2, 2)]
        if case == "an older call":
            clock.advance(GATHER * 2, wait=False)  # B is old by the time A ends
        jobs.gate(a)[1].set()
        with changed:
            assert changed.wait_for(lambda: len(results) or len(claims) > 1, timeout=5)
        if case == "all end":
            assert node.parts.tasks._gathering  # waiting for B
            jobs.gate(b)[1].set()
            clock.advance(0)
            assert claims[1] == (2, 2)  # C and D in one round
        else:
            if case == "the oldest is old enough":
                assert claims == [(2, 2)]
                clock.advance(GATHER, wait=False)
            with changed:
                assert changed.wait_for(lambda: len(claims) > 1, timeout=5)
            assert claims[1] == (1, 1)  # C, while B still runs
            jobs.gate(b)[1].set()
            clock.advance(0)
        assert {store.tasks[i].status for i in ids} == {TaskStatus.SUCCEEDED}
    finally:
        node.stop(timeout=5)


def test_a_failing_task_is_retried_with_backoff_then_fails(
    make_node: MakeNode,
    clock: FakeClock,
    store: InMemoryStore,
    calls: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    tid = store.add_task(BOOM, "no", max_attempts=3)
    with caplog.at_level(logging.WARNING, logger="django_htask.node"):
        make_node()
        retry = RetryPolicy(1.0, 3600.0)  # RETRY_BACKOFF is 1 s in the test settings
        clock.advance(retry.delay(1))
        clock.advance(retry.delay(2))
    task = store.tasks[tid]
    assert (task.status, task.attempts) == (TaskStatus.FAILED, 3)
    assert calls["boom"] == ["no"] * 3
    assert [r.attempt for r in store.runs_of(task_id=tid)] == [1, 2, 3]
    # Each attempt's failure is logged once, saying whether and when it is retried.
    failed = [r for r in caplog.records if getattr(r, "action", None) == "run_failed"]
    assert [(r.levelname, r.getMessage()) for r in failed] == [
        ("WARNING", f"{BOOM} failed: RuntimeError: no; retrying in 1s, attempt 2 of 3"),
        ("WARNING", f"{BOOM} failed: RuntimeError: no; retrying in 2s, attempt 3 of 3"),
        ("ERROR", f"{BOOM} failed: RuntimeError: no (attempt 3 of 3, not retried)"),
    ]


def test_a_task_due_later_waits_on_a_timer_nothing_claimed(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, calls: Any
) -> None:
    tid = store.add_task(ADD, 7, run_at=START + timedelta(seconds=5))
    node = make_node()
    assert node.next_task_wake() == START + timedelta(seconds=5)
    assert store.tasks[tid].locked_by is None
    clock.advance(5)
    assert calls["add"] == [7]


def test_a_task_s_result_is_stored_and_a_result_over_the_limit_fails_it_unretried(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore
) -> None:
    import dataclasses

    from django_htask.conf import get_settings
    from django_htask.engine import decode_result

    make_node(settings=dataclasses.replace(get_settings(), result_max_bytes=100))
    echo = "tests.integration.testapp.tasks:echo"
    small = store.add_task(echo, [1, "a"], max_attempts=3)
    big = store.add_task(echo, "x" * 200, max_attempts=3)
    clock.advance(0)
    done = store.tasks[small]
    assert done.status == TaskStatus.SUCCEEDED and done.result is not None
    assert decode_result(done.result) == [1, "a"]
    clock.advance(60)  # a retry would have run by now
    failed = store.tasks[big]
    assert (failed.status, failed.attempts, failed.result) == (TaskStatus.FAILED, 1, None)
    assert "is 202 bytes encoded, over the limit of 100" in failed.last_error


# -- several nodes -------------------------------------------------------------------------
def test_a_dead_nodes_running_task_is_reaped_and_retried(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, calls: Any
) -> None:
    store.register_node("ghost", "host", 1, "0", START)
    tid = store.add_task(ADD, 3, max_attempts=2)
    store.start_tasks("ghost", START, 1, START + timedelta(seconds=60))  # then it died
    node = make_node()
    timeout = node.settings.node_timeout
    clock.advance(timeout + node.settings.heartbeat_interval)
    assert store.nodes["ghost"].stopped_at is not None
    assert store.tasks[tid].status == TaskStatus.PENDING  # retried after the backoff (1 s)
    clock.advance(1)
    task = store.tasks[tid]
    assert (task.status, task.attempts) == (TaskStatus.SUCCEEDED, 2)
    crashed, retried = store.attempts_of(tid)  # the success from the task's row
    assert "(ghost) stopped answering during attempt 1 of 2" in crashed.error
    assert (retried.status, retried.node, retried.attempt) == ("succeeded", node.node_id, 2)
    assert [r.status for r in store.runs_of(task_id=tid)] == ["failed"]


def test_the_standby_fires_what_a_dead_owner_left(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, calls: Any
) -> None:
    ids = [store.add_schedule(f"s{i}", ADD, "@every 1s", args=(i,)) for i in range(10)]
    a, b = make_node(), make_node()
    clock.advance(a.settings.heartbeat_interval)  # members settled, handover done
    victim, survivor = (a, b) if a.owned_schedules() else (b, a)
    lost = set(victim.owned_schedules())
    assert lost and set(survivor.placed_schedules()) == set(ids)  # standby for the rest
    victim.parts.ctx.control.close(wait=False)  # it dies: fires nothing more
    victim.parts.liveness.close(wait=False)
    died = clock.now()
    for _ in range(6):
        clock.advance(1)
    for sid in lost:
        fired = [r.scheduled_for for r in store.runs_of(schedule_id=sid) if r.started_at]
        later = [f for f in fired if f > died]
        assert later and later[0] - died <= timedelta(seconds=3), (sid, fired)
        assert len(fired) == len(set(fired))


def one_row_per_occurrence(store: InMemoryStore, sid: int) -> list[str]:
    """The statuses of ``sid``'s rows by occurrence, checking that every occurrence of
    its ``@every 1s`` from the first row to the last has exactly one row."""
    rows = sorted(store.runs_of(schedule_id=sid), key=lambda r: r.scheduled_for or START)
    times = [r.scheduled_for for r in rows]
    assert times[0] is not None and times[-1] is not None
    span = int((times[-1] - times[0]).total_seconds())
    assert times == [times[0] + i * SECOND for i in range(span + 1)], (sid, times)
    return [r.status for r in rows]


def kill(node: Node) -> None:
    """The node dies: it fires nothing more and its heartbeat stops."""
    node.parts.ctx.control.close(wait=False)
    node.parts.liveness.close(wait=False)


def test_every_occurrence_of_a_dead_owner_has_one_row(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, calls: Any
) -> None:
    """The standby fires the occurrence the owner left STANDBY_DELAY late, as the run
    of the latest due (catch_up="latest"): the ones folded into it are recorded."""
    ids = [store.add_schedule(f"s{i}", ADD, "@every 1s", args=(i,)) for i in range(10)]
    a, b = make_node(), make_node()
    clock.advance(a.settings.heartbeat_interval)
    victim = a if a.owned_schedules() else b
    lost = set(victim.owned_schedules())
    kill(victim)
    for _ in range(8):
        clock.advance(1)
    for sid in ids:
        statuses_ = one_row_per_occurrence(store, sid)
        assert statuses_[-1] == "succeeded"
        if sid in lost:
            assert "skipped" in statuses_
    folded = [r for sid in lost for r in store.runs_of(schedule_id=sid) if r.status == "skipped"]
    for run in folded:
        assert run.error.startswith("folded into the run of "), run.error
        assert run.error.endswith("(catch_up=latest)"), run.error


def test_a_late_node_is_given_nothing_and_its_standby_fires_for_it(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, calls: Any
) -> None:
    """A node joining while a dead one is not yet declared dead (its heartbeat is only
    late) does not rebalance the dead node's schedules back onto it: they are fired at
    their time, and every occurrence keeps one row."""
    from django_htask.node.membership import LATE_BEATS
    from django_htask.partition import Partition

    ids = [store.add_schedule(f"s{i}", ADD, "@every 1s", args=(i,)) for i in range(12)]
    a, b = make_node(), make_node()
    beat = a.settings.heartbeat_interval
    clock.advance(beat)
    kill(b)
    for _ in range(int((LATE_BEATS + 1) * beat) + 2):  # late, far from NODE_TIMEOUT (60 s)
        clock.advance(1)
    assert clock.now() - store.nodes[b.node_id].last_heartbeat < timedelta(seconds=45)
    c = make_node()
    joined = clock.now()
    for _ in range(int(beat) + 5):
        clock.advance(1)
    pair = Partition(c.node_id, [a.node_id, c.node_id])
    assert set(c.owned_schedules()) == {sid for sid in ids if pair.owns(sid)}
    for sid in ids:
        one_row_per_occurrence(store, sid)
        after = [r for r in store.runs_of(schedule_id=sid) if r.scheduled_for > joined]  # type: ignore[operator]
        assert after and all(r.status == "succeeded" for r in after), [
            (r.status, r.node, r.error) for r in after
        ]
        assert b.node_id not in {r.node for r in after}


@pytest.mark.parametrize("process_ended", [True, False])
def test_a_node_killed_in_a_run_is_declared_dead_once_late_and_gone(
    make_node: MakeNode,
    clock: FakeClock,
    store: InMemoryStore,
    calls: Any,
    process_ended: bool,
) -> None:
    """The node firing an ``@every 1s`` schedule (``overlap="skip"``) dies before the
    end of its run is written: the run's row says running. Killed (its process ended:
    the database ends its sessions), it is declared dead once its heartbeat is late
    and its presence was gone at two of the survivor's heartbeats, long before
    ``NODE_TIMEOUT`` (60 s): its run is failed as lost and the schedule runs again.
    Only paused (its sessions kept), its run may still be going: the schedule is
    skipped, each occurrence with its row, and the node stays live."""
    import dataclasses

    from django_htask.conf import get_settings
    from django_htask.store.rules import RUN_LOST

    sid = store.add_schedule("s", ADD, "@every 1s", args=(1,))
    settings = dataclasses.replace(get_settings(), heartbeat_interval=1.0)
    a, b = make_node(settings=settings), make_node(settings=settings)
    beat = settings.heartbeat_interval
    clock.advance(3 * beat)
    victim, survivor = (a, b) if sid in a.owned_schedules() else (b, a)

    def die(outcome: Any) -> None:  # the run ended; its end is never written
        kill(victim)

    victim.parts.ctx.results.push = die  # type: ignore[method-assign]
    clock.advance(1)
    died = clock.now()
    [left] = [r for r in store.runs_of(schedule_id=sid) if r.status == "running"]
    if process_ended:
        # Its heartbeat thread was told to stop, not waited for: one still in a heartbeat
        # would take its presence again after the sessions end.
        victim.parts.liveness.close(timeout=5)
        store.end_sessions(victim.node_id)
    for _ in range(10):  # late at two beats, gone for one more, reaped at the next
        clock.advance(1)
    one_row_per_occurrence(store, sid)
    after = [r for r in store.runs_of(schedule_id=sid) if r.scheduled_for > died]  # type: ignore[operator]
    if not process_ended:
        assert store.nodes[victim.node_id].stopped_at is None
        assert {r.status for r in after} == {"skipped"}, after
        return
    stopped_at = store.nodes[victim.node_id].stopped_at
    assert stopped_at is not None and stopped_at - died <= 6 * SECOND, stopped_at - died
    lost = next(r for r in store.runs_of(schedule_id=sid) if r.run_id == left.run_id)
    assert (lost.status, lost.error) == ("failed", RUN_LOST)
    assert after[-1].status == "succeeded" and after[-1].node == survivor.node_id


def test_a_restart_of_the_database_declares_no_node_dead(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore
) -> None:
    """The database restarts: every session ends, so every node's presence is gone
    until its next heartbeat reaches the database. A node whose first four heartbeats
    after the restart fail (its connection was dead, it is slow) is late and absent for
    a while; the others, which just found the database away, must not take it for
    killed."""
    import dataclasses

    from django_htask.conf import get_settings

    settings = dataclasses.replace(get_settings(), heartbeat_interval=1.0)
    a, b = make_node(settings=settings), make_node(settings=settings)
    clock.advance(3)
    with store.outage("the database restarts"):
        clock.advance(1)
        clock.advance(1)
    for node in (a, b):
        store.end_sessions(node.node_id)
    renew, fails = a.parts.liveness._renew, iter(range(4))

    def reconnecting(now: datetime, lease_until: datetime, renew_below: datetime) -> None:
        if next(fails, None) is not None:
            raise StoreUnavailable("the connection was closed")
        renew(now, lease_until, renew_below)

    a.parts.liveness._renew = reconnecting  # type: ignore[method-assign]
    for _ in range(10):
        clock.advance(1)
    assert store.nodes[a.node_id].stopped_at is None
    assert a.fenced is None and store.absent([a.node_id, b.node_id]) == []


def test_a_heartbeat_leaves_the_leases_taken_less_than_an_interval_ago() -> None:
    """Renewed by the next beat instead, a lease still has half of ``LEASE`` less the
    interval left before then (and every lease is renewed where ``LEASE`` is shorter
    than the interval)."""
    for lease, interval, kept in [(60, 10, 10), (15, 10, 2.5), (10, 10, 0), (5, 10, 0)]:
        settings = HtaskSettings(lease=lease, heartbeat_interval=interval)
        until, below = settings.lease_renewal(START)
        assert until == START + timedelta(seconds=lease)
        assert until - below == timedelta(seconds=kept), (lease, interval)


def test_a_node_declared_dead_stops_and_writes_nothing(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, calls: Any
) -> None:
    node = make_node()
    store.nodes[node.node_id].stopped_at = clock.now()  # the reaper of another node
    tid = store.add_task(ADD, 1)
    clock.advance(node.settings.heartbeat_interval)
    assert node.fenced is not None and node.stop_requested
    assert store.tasks[tid].status == TaskStatus.PENDING  # it claimed nothing


# -- stopping --------------------------------------------------------------------------------
def test_stop_past_its_timeout_ends_the_attempt_and_keeps_the_node_alive_a_moment(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore
) -> None:
    tid = store.add_task(HOLD, "stop", max_attempts=2)
    node = make_node(start=False)
    node.start()
    clock.advance(0, wait=False)
    assert jobs.gate("stop")[0].wait(5)
    stopped = clock.now()
    node.stop(timeout=0.1)
    assert node.unfinished == 1
    task = store.tasks[tid]
    assert (task.status, task.attempts) == (TaskStatus.PENDING, 1)
    assert task.run_at == stopped + timedelta(seconds=EXIT_GRACE)  # after the exit
    timeout = timedelta(seconds=node.settings.node_timeout)
    assert store.nodes[node.node_id].last_heartbeat + timeout == task.run_at
    jobs.gate("stop")[1].set()


def test_a_clean_stop_marks_the_node_stopped(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore
) -> None:
    node = make_node()
    node.stop(timeout=1)
    assert node.unfinished == 0
    assert store.nodes[node.node_id].stopped_at == clock.now()
    assert RunStatus.RUNNING not in {r.status for r in store.runs.values()}


def test_the_end_of_a_task_with_a_lock_starts_the_next_without_a_poll(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore
) -> None:
    jobs.running.update(now=0, most=0)
    first = store.add_task(HOLD, "lock-1", lock="l")
    second = store.add_task(HOLD, "lock-2", lock="l")
    jobs.gate("lock-2")[1].set()  # the second ends as soon as it starts
    node = make_node(workers=2, start=False, poll_interval=3600.0)
    node.start()
    clock.advance(0, wait=False)
    assert jobs.gate("lock-1")[0].wait(5)
    assert store.tasks[second].status == TaskStatus.PENDING  # a free worker, a held lock
    jobs.gate("lock-1")[1].set()
    clock.advance(0)  # no time passes: no poll, no timer
    assert [store.tasks[i].status for i in (first, second)] == [TaskStatus.SUCCEEDED] * 2
    assert jobs.running["most"] == 1


def test_a_reap_sends_rows_reaped_which_the_node_metrics_count_without_a_log_record(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node's reaper counter is fed by the ``rows_reaped`` signal: right with the
    reaper's logger silenced (no record to read)."""
    from prometheus_client import CollectorRegistry

    from django_htask.metrics import NodeMetrics
    from django_htask.signals import rows_reaped

    monkeypatch.setattr(logging.getLogger("django_htask.node.liveness"), "disabled", True)
    sent: list[dict[str, Any]] = []

    def receive(sender: Any, **kwargs: Any) -> None:
        sent.append({k: v for k, v in kwargs.items() if k != "signal"})

    rows_reaped.connect(receive, weak=False, dispatch_uid="test_rows_reaped")
    store.register_node("ghost", "host", 1, "0", START)
    store.add_task(ADD, 3, max_attempts=2)
    store.start_tasks("ghost", START, 1, START + timedelta(seconds=60))  # then it died
    node = make_node()
    registry = CollectorRegistry()
    metrics = NodeMetrics(node.node_id, registry)
    metrics.connect()
    try:
        clock.advance(node.settings.node_timeout + node.settings.heartbeat_interval)
    finally:
        metrics.disconnect()
        rows_reaped.disconnect(dispatch_uid="test_rows_reaped")
    assert sent == [{"node": node.node_id, "rows": 2}]  # the node declared dead, its task
    assert registry.get_sample_value("django_htask_node_reaped_total") == 2


def _fails(
    monkeypatch: pytest.MonkeyPatch,
    store: InMemoryStore,
    method: str,
    times: int,
    error: Callable[[], Exception],
) -> list[datetime]:
    """Have the store's ``method`` raise ``error()`` its first ``times`` calls; return
    the list of when (the store's clock) it raised."""
    real = getattr(store, method)
    failed: list[datetime] = []

    def failing(*args: Any) -> Any:
        if len(failed) < times:
            failed.append(store.clock.now())
            raise error()
        return real(*args)

    monkeypatch.setattr(store, method, failing)
    return failed


def test_the_heartbeat_goes_on_after_an_unexpected_error(
    make_node: MakeNode,
    clock: FakeClock,
    store: InMemoryStore,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A beat that fails with an error the node does not expect (a bug, an error a store
    did not translate) is logged, and the next beat comes: a heartbeat that stopped
    would have the others declare this running node dead."""
    node = make_node()
    beat = node.settings.heartbeat_interval
    failed = _fails(monkeypatch, store, "reap", 1, lambda: RuntimeError("a bug in the reaper"))
    # Only the beat's records: the start's are kept when an earlier test in this
    # process (runscheduler, called in-process) set django_htask's level to INFO.
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="django_htask"):
        clock.advance(beat)
    assert failed == [clock.now()]
    assert [getattr(r, "action", "") for r in caplog.records] == ["node_error"]
    clock.advance(beat)
    assert store.nodes[node.node_id].last_heartbeat == clock.now()


def _deadlocked() -> StoreUnavailable:
    """The error a database store raises for a deadlock's victim on MySQL/MariaDB (a
    driver's error 1213, as Django passes it on)."""
    try:
        try:
            raise OSError(1213, "Deadlock found when trying to get lock")
        except OSError as driver:
            raise StoreUnavailable(str(driver)) from driver
    except StoreUnavailable as exc:
        return exc


def test_a_deadlock_is_told_apart_from_an_outage() -> None:
    import psycopg.errors  # the PostgreSQL driver, in the test extra

    assert _deadlocked().deadlock
    for state in (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure):
        django_error = OSError("deadlock detected")  # Django's error, its cause the driver's
        django_error.__cause__ = state("deadlock detected")
        victim = StoreUnavailable("deadlock detected")
        victim.__cause__ = django_error
        assert victim.deadlock, state
    assert not StoreUnavailable("connection refused").deadlock
    refused = StoreUnavailable("connection refused")
    refused.__cause__ = ConnectionRefusedError(111, "Connection refused")
    assert not refused.deadlock


def test_a_heartbeat_that_is_a_deadlocks_victim_is_tried_again_at_once(
    make_node: MakeNode,
    clock: FakeClock,
    store: InMemoryStore,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Not backed off for an interval: the others would see this node late."""
    node = make_node()
    victims = _fails(monkeypatch, store, "heartbeat", 2, _deadlocked)
    with caplog.at_level(logging.INFO, logger="django_htask"):
        clock.advance(node.settings.heartbeat_interval)
    assert victims == [clock.now()] * 2
    assert store.nodes[node.node_id].last_heartbeat == clock.now()  # the third try
    assert [getattr(r, "action", "") for r in caplog.records] == ["deadlock_retried"] * 2


def test_a_step_of_the_control_thread_that_is_a_deadlocks_victim_is_tried_again_at_once(
    make_node: MakeNode,
    clock: FakeClock,
    store: InMemoryStore,
    monkeypatch: pytest.MonkeyPatch,
    calls: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The occurrence fires at its time, not after the database back-off's first delay
    (the transaction was rolled back: another try most likely passes)."""
    sid = store.add_schedule("s", ADD, "@every 1m", args=(1,))
    make_node()
    victims = _fails(monkeypatch, store, "claim_occurrence", 2, _deadlocked)
    with caplog.at_level(logging.INFO, logger="django_htask"):
        clock.advance(60)
    assert victims == [clock.now()] * 2
    assert calls["add"] == [1]
    assert [r.status for r in store.runs_of(schedule_id=sid)] == ["succeeded"]
    retried = [r for r in caplog.records if getattr(r, "action", "") == "deadlock_retried"]
    assert len(retried) == 2
    assert not [r for r in caplog.records if getattr(r, "action", "") == "db_unavailable"]


def test_async_tasks_run_on_the_nodes_async_lane_each_in_a_context_of_its_own(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore
) -> None:
    """The node's async def tasks run as tasks of one event loop, on a thread that is
    no worker's: each call sees its own token, and a task it left running is cancelled
    as it returns, as asyncio.run would."""
    jobs.seen.clear()
    jobs.threads.clear()
    ids = [store.add_task("tests.unit.node.jobs:leaves_a_task", name) for name in "abc"]
    node = make_node(workers=2)
    clock.advance(0)
    assert [store.tasks[i].status for i in ids] == [TaskStatus.SUCCEEDED] * 3
    seen = [jobs.seen[name] for name in "abc"]
    assert len({loop for loop, _, _ in seen}) == 1
    assert len({id(token) for _, token, _ in seen}) == 3 and None not in [t for _, t, _ in seen]
    assert [left for _, _, left in seen] == [[True]] * 3
    assert jobs.threads == {f"{node.node_id}-async-1"}


def test_async_tasks_on_one_worker_share_its_loop_each_in_a_context_of_its_own(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore
) -> None:
    """Without the async lane (``ASYNC_LANE`` False), a worker runs its async calls on
    one event loop, kept between them, as asyncio.run would on a loop of its own: each
    call sees its own token, and a task it left running is cancelled as it returns."""
    jobs.seen.clear()
    ids = [store.add_task("tests.unit.node.jobs:leaves_a_task", name) for name in "ab"]
    make_node(workers=1, settings=HtaskSettings(async_lane=False))
    clock.advance(0)
    assert [store.tasks[i].status for i in ids] == [TaskStatus.SUCCEEDED] * 2
    (loop_a, token_a, left_a), (loop_b, token_b, left_b) = jobs.seen["a"], jobs.seen["b"]
    assert loop_a == loop_b
    assert None is not token_a is not token_b is not None
    assert left_a == left_b == [True]


def test_an_async_call_that_raised_leaves_the_next_one_a_new_loop(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore
) -> None:
    """Without the async lane: a call that raised may have been stopped inside the
    loop's own code: its worker's next call gets a loop of its own, and the failure is
    the task's only."""
    jobs.seen.clear()
    failing = store.add_task("tests.unit.node.jobs:fails_in_its_loop", "a")
    ids = [store.add_task("tests.unit.node.jobs:leaves_a_task", name) for name in "bc"]
    make_node(workers=1, settings=HtaskSettings(async_lane=False))
    clock.advance(0)
    assert store.tasks[failing].status == TaskStatus.FAILED
    assert [store.tasks[i].status for i in ids] == [TaskStatus.SUCCEEDED] * 2
    (loop_a, _, _), (loop_b, _, _), (loop_c, _, _) = (jobs.seen[n] for n in "abc")
    assert cast(Any, loop_a).is_closed()
    assert id(loop_a) != loop_b == loop_c


def test_while_a_buffered_task_waits_for_a_worker_a_round_waits_for_the_last_to_begin() -> None:
    """On threads, a round asked for (a call's end) while a task handed out waits for a
    worker, the buffer not empty, waits until the last of them is begun, which asks for
    it, or ``PREFETCH_WITHIN`` at most; one asked for during a round waits for its end.
    Asked at each end, with calls a fraction of a millisecond long (``async def``
    tasks), every other round wrote one end and claimed one task."""
    requests: list[int] = []
    timers: list[tuple[float, Callable[..., object], tuple[Any, ...]]] = []
    waiting = [0]

    def later(delay: float, fn: Callable[..., object], *args: Any) -> bool:
        timers.append((delay, fn, args))
        return True

    ctx: Any = SimpleNamespace(
        settings=HtaskSettings(prefetch_within=0.1),
        node_id="n",
        running=SimpleNamespace(waiting=lambda: waiting[0]),
        control=SimpleNamespace(
            once=lambda call: SimpleNamespace(request=lambda: requests.append(1)), later=later
        ),
    )
    dispatch = TaskDispatch(ctx, cast(Any, SimpleNamespace(run=lambda *args: None)))

    def job(task_id: int) -> None:
        dispatch._job(
            cast(Any, SimpleNamespace(id=task_id, payload=b"", function="f", attempts=1,
                                      run_at=START, timeout=None))
        )  # fmt: skip

    dispatch.ask()
    assert len(requests) == 1  # nothing buffered: at once
    dispatch._buffered.update({1, 2})
    waiting[0] = 2
    dispatch.ask()
    dispatch.ask()
    assert len(requests) == 1
    assert [delay for delay, _fn, _args in timers] == [0.1]  # one timer: PREFETCH_WITHIN
    job(1)  # one more waits after it
    assert len(requests) == 1
    waiting[0] = 1
    job(2)  # the last one: the round now
    assert len(requests) == 2
    _delay, fn, args = timers[0]
    fn(*args)  # no round since it was set (none ran here): it asks too
    assert len(requests) == 3
    dispatch._gathering, waiting[0] = False, 0
    dispatch.ask()  # none waits: at once
    assert len(requests) == 4 and len(timers) == 1
    # An end while a round claims: put off to the round's end, when what it handed out
    # is known (here none waits: the round comes at once).
    dispatch._in_round = True
    dispatch.ask()
    assert len(requests) == 4
    dispatch._ask_after_round()
    assert len(requests) == 5
    dispatch._ask_after_round()  # nothing put off: no round
    assert len(requests) == 5


def test_the_buffer_holds_what_the_workers_begin_within_prefetch_within() -> None:
    """A node claims ahead as many tasks as its workers are expected to begin within
    ``PREFETCH_WITHIN`` at the pace of its recent calls, at most ``PREFETCH_PER_WORKER``
    per worker; none before a call ended, nor where the store does not buffer (the
    in-memory store), nor with either setting 0."""
    store = SimpleNamespace(buffers=True)
    ctx: Any = SimpleNamespace(
        settings=HtaskSettings(prefetch_within=0.1),
        store=store,
        workers=8,
        running=[],
        control=SimpleNamespace(once=lambda call: None),
    )
    dispatch = TaskDispatch(ctx, cast(Any, None))
    assert dispatch.buffer() == 0  # no call has ended yet
    # Each worker begins within/seconds calls in PREFETCH_WITHIN, 8 at most (64 in all).
    sizes = [(0.0, 64), (0.0001, 64), (0.0125, 64), (0.02, 40), (0.1, 8), (0.2, 4), (0.5, 1)]
    for seconds, size in [*sizes, (1.0, 0)]:
        dispatch.call_seconds = seconds
        assert dispatch.buffer() == size, seconds
    ctx.settings = HtaskSettings(prefetch_within=0.1, prefetch_per_worker=1)
    for seconds, size in [(0.0, 8), (0.0001, 8), (0.1, 8), (0.2, 4), (0.5, 1), (1.0, 0)]:
        dispatch.call_seconds = seconds
        assert dispatch.buffer() == size, seconds
    ctx.settings = HtaskSettings(prefetch_within=0.1, prefetch_per_worker=0)
    assert dispatch.buffer() == 0
    ctx.settings = HtaskSettings(prefetch_within=0.1)
    dispatch.call_seconds = 0.2
    ctx.running = list(range(10))  # 8 calls and 2 buffered
    assert dispatch.free() == (-2, 2)
    ctx.running = list(range(3))
    assert dispatch.free() == (5, 4)
    dispatch.max_tasks, dispatch.claimed = 20, 13  # 7 more in all
    assert dispatch.free() == (5, 2)
    dispatch.max_tasks = None
    store.buffers = False
    assert dispatch.buffer() == 0 and dispatch.free() == (5, 0)
    store.buffers = True
    ctx.settings = HtaskSettings(prefetch_within=0)
    assert dispatch.buffer() == 0
