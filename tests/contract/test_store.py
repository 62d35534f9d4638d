"""The store contract: what every store does, run on the in-memory store and on the
database of this pass of the suite (SQLite, or PostgreSQL in the PostgreSQL pass).

The node's logic is tested on the in-memory store (``tests/unit/node``); this suite
is what makes that mean something for the database stores."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from django_htask.engine import FakeClock
from django_htask.enums import RunStatus, TaskStatus
from django_htask.exceptions import NodeFenced, NotMigrated, StoreUnavailable
from django_htask.queues import QueueFilter, QueueStates
from django_htask.retry import RetryPolicy
from django_htask.store import Abandoned, RunOutcome, ScheduleRow, Serving, Store, get_store
from django_htask.store.base import DEFAULT_RETRY, RETRY_COLUMNS, RetryColumns
from django_htask.store.rules import (
    BROKEN_MAX,
    claimed_task,
    ended_task,
    snoozed_task,
    writes_run,
)
from django_htask.testing import InMemoryStore

NOW = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = NOW + timedelta(seconds=60)
ADD = "tests.integration.testapp.tasks:add"
RETRY = RetryPolicy(10, 60)


@dataclass
class Kit:
    """A store and what another process would do to its rows, and read back."""

    store: Store
    memory: InMemoryStore | None

    def add_schedule(self, name: str = "s", text: str = "@every 1m", **fields: Any) -> int:
        if self.memory is not None:
            fields = retry_record(fields, RETRY_COLUMNS[:5])  # retry_backoff: the row's
            return self.memory.add_schedule(name, ADD, text, args=(1,), **fields)
        from django_htask.models import Schedule

        row = Schedule(name=name, function=ADD, schedule=text, **fields)
        row.set_call((1,))
        row.save()
        return row.pk

    def add_tasks(self, n: int, run_at: datetime = NOW, **fields: Any) -> list[int]:
        if self.memory is not None:
            fields = retry_record(fields, RETRY_COLUMNS)
            return [self.memory.add_task(ADD, 1, run_at=run_at, **fields) for _ in range(n)]
        from django_htask.engine import encode_call
        from django_htask.models import Task

        payload = encode_call(ADD, (1,), {})
        rows = [Task(function=ADD, payload=payload, run_at=run_at, **fields) for _ in range(n)]
        return [t.pk for t in Task.objects.bulk_create(rows)]

    def add_keyed(self, key: str, *args: Any, on_conflict: str = "ignore", **fields: Any) -> int:
        """A task due now with ``key``, as ``schedule(ADD, *args, key=key, ...)`` adds it."""
        if self.memory is not None:
            return self.memory.add_task(ADD, *args, key=key, on_conflict=on_conflict, **fields)
        from django_htask.api import schedule

        return schedule(ADD, *args, key=key, on_conflict=on_conflict, **fields).pk

    def task(self, task_id: int) -> Any:
        if self.memory is not None:
            return self.memory.tasks[task_id]
        from django_htask.models import Task

        return Task.objects.get(pk=task_id)

    def schedule(self, schedule_id: int) -> Any:
        if self.memory is not None:
            return self.memory.schedules[schedule_id]
        from django_htask.models import Schedule

        return Schedule.objects.get(pk=schedule_id)

    def node(self, node_id: str) -> Any:
        if self.memory is not None:
            return self.memory.nodes[node_id]
        from django_htask.models import Node

        return Node.objects.get(pk=node_id)

    def runs(self, **where: int) -> list[Any]:
        if self.memory is not None:
            return self.memory.runs_of(**where)
        from django_htask.models import Run

        return list(Run.objects.filter(**where).order_by("id"))

    def attempts(self, task_id: int) -> list[Any]:
        """A task's attempts: its runs, and its success from its row."""
        if self.memory is not None:
            return self.memory.attempts_of(task_id)
        from django_htask.models import Run

        return Run.objects.attempts_of(self.task(task_id))

    def cancel(self, task_id: int) -> bool:
        """Cancel a task not started, as ``cancel(token)`` does."""
        if self.memory is not None:
            return self.memory.cancel_task(task_id)
        from django_htask.api import cancel

        return cancel(self.task(task_id).token)

    def request_abort(self, *, task_id: int | None = None, run_id: int | None = None) -> bool:
        """Ask for an abort as ``abort(token)`` and the admin's *Abort* do."""
        if self.memory is not None:
            return self.memory.request_abort(task_id=task_id, run_id=run_id)
        from django_htask.api import AbortResult, abort
        from django_htask.operations import abort_runs

        if task_id is not None:
            return abort(self.task(task_id).token) == AbortResult.REQUESTED
        return abort_runs([run_id or 0]) == 1

    def set_queue(self, name: str, *, paused: bool | None = None, limit: int | None = 0) -> Serving:
        """Pause or resume queue ``name`` (``paused``), or set its limit (None: none; 0
        leaves it), as an operator does; return what a node serving every queue then
        reads (:meth:`Store.queue_states`)."""
        if self.memory is not None:
            changes: dict[str, Any] = {} if paused is None else {"paused": paused}
            if limit != 0:
                changes["max_running"] = limit
            self.memory.set_queue(name, **changes)
        else:
            from django_htask import limit_queue, pause_queue, resume_queue

            if paused is not None:
                (pause_queue if paused else resume_queue)(name)
            if limit != 0:
                limit_queue(name, limit)
        return Serving(states=self.store.queue_states())

    def register(self, *node_ids: str, at: datetime = NOW) -> None:
        for n, node_id in enumerate(node_ids):
            self.store.register_node(node_id, "host", n + 1, "0", at)

    def end_sessions(self, node_id: str) -> None:
        """The process of ``node_id`` ends (killed): the database ends its sessions (in
        this test's process, this thread's connection is the one its heartbeats used)."""
        if self.memory is not None:
            self.memory.end_sessions(node_id)
            return
        from django.db import connection

        connection.close()

    @contextmanager
    def outage(self) -> Iterator[type[Exception]]:
        """The database away (every statement refused) for the block; yields the class
        of the driver's error the store is to turn into StoreUnavailable."""
        if self.memory is not None:
            with self.memory.outage("connection refused"):
                yield ConnectionError
            return
        from django.db import OperationalError, connection

        def refused(*args: Any, **kwargs: Any) -> Any:
            raise OperationalError("connection refused")

        connection.cursor = refused  # type: ignore[method-assign]
        try:
            yield OperationalError
        finally:
            del connection.cursor


def retry_record(fields: dict[str, Any], columns: tuple[str, ...]) -> dict[str, Any]:
    """The retry ``columns`` among ``fields`` as the in-memory store's rows hold them."""
    names = [f.name for f in dataclasses.fields(RetryColumns)]
    given = {n: fields[c] for n, c in zip(names, columns, strict=False) if c in fields}
    others = {k: v for k, v in fields.items() if k not in columns}
    return {**others, "retry": RetryColumns(**given)} if given else others


@pytest.fixture(
    params=["memory", pytest.param("database", marks=pytest.mark.django_db(transaction=True))]
)
def kit(request: pytest.FixtureRequest) -> Iterator[Kit]:
    if request.param == "memory":
        memory = InMemoryStore(FakeClock(NOW))
        yield Kit(memory, memory)
        return
    from django_htask.clock import use_clock

    with use_clock(FakeClock(NOW)):
        yield Kit(get_store(), None)


def outcome(task_or_schedule: dict[str, Any], **fields: Any) -> RunOutcome:
    base: dict[str, Any] = {
        "status": RunStatus.SUCCEEDED,
        "function": ADD,
        "name": "s",
        "node": "n1",
        "attempt": 1,
        "scheduled_for": NOW,
        "started_at": NOW,
        "finished_at": NOW + timedelta(seconds=1),
    }
    return RunOutcome(**{**base, **task_or_schedule, **fields})


# -- schedules -------------------------------------------------------------------------
def test_versions_rise_and_a_sync_reads_only_what_changed(kit: Kit) -> None:
    """A sync reads the schedules written above the horizon it last saw: none while
    nothing changed. On PostgreSQL the horizon is the server's oldest open
    transaction, which another process may hold back (the PostgreSQL pass runs two
    test processes on one server, one of them migrating its database): the rows above
    it are then read again, as they must be, and the horizon stays until it ends."""
    a, b = kit.add_schedule("a"), kit.add_schedule("b")
    refs, top = kit.store.load_schedules()
    assert {r.id for r in refs} == {a, b}
    versions = {r.id: r.version for r in refs}
    changed, top2 = kit.store.changed_schedules(top)
    assert sorted(r.id for r in changed) == sorted(i for i, v in versions.items() if v > top)
    assert top2 >= top
    kit.register("n1")
    row = kit.store.get_schedule(a)
    assert row is not None and row.next_run_at is not None
    kit.store.claim_occurrence("n1", row, row.next_run_at + timedelta(minutes=1), NOW, [])
    changed, top3 = kit.store.changed_schedules(top2)
    read = {r.id: r.version for r in changed}
    assert read[a] > versions[a]  # the claim wrote it: its version rose
    assert set(read) == {a} | ({b} if versions[b] > top2 else set())
    assert top3 >= top2


def test_an_occurrence_is_claimed_once(kit: Kit) -> None:
    sid = kit.add_schedule()
    kit.register("n1", "n2")
    row = kit.store.get_schedule(sid)
    assert row is not None and row.next_run_at is not None
    later = row.next_run_at + timedelta(minutes=1)
    run = outcome({"schedule_id": sid}, status=RunStatus.RUNNING)
    ids = kit.store.claim_occurrence("n1", row, later, NOW, [run])
    assert ids is not None and len(ids) == 1
    assert kit.store.claim_occurrence("n2", row, later, NOW, [run]) is None  # the second node
    assert kit.schedule(sid).next_run_at == later
    assert [r.status for r in kit.runs(schedule_id=sid)] == ["running"]


def due_schedule(kit: Kit) -> tuple[int, ScheduleRow]:
    """A schedule, as node n1 (registered) reads it to fire it."""
    sid = kit.add_schedule()
    kit.register("n1")
    row = kit.store.get_schedule(sid)
    assert row is not None and row.next_run_at is not None
    return sid, row


def test_a_claim_returns_its_run_ids_in_the_order_of_its_runs(kit: Kit) -> None:
    sid, row = due_schedule(kit)
    first = row.next_run_at + timedelta(minutes=1)
    runs = [
        outcome({"schedule_id": sid}, status=RunStatus.MISSED, error="missed"),
        outcome({"schedule_id": sid}, status=RunStatus.RUNNING, scheduled_for=NOW),
        outcome({"schedule_id": sid}, status=RunStatus.RUNNING, scheduled_for=first),
    ]
    ids = kit.store.claim_occurrence("n1", row, first, NOW, runs)
    assert ids is not None and len(ids) == 3
    by_id = {r.run_id if kit.memory else r.id: r for r in kit.runs(schedule_id=sid)}
    assert [(by_id[i].status, by_id[i].scheduled_for) for i in ids] == [
        ("missed", NOW),
        ("running", NOW),
        ("running", first),
    ]
    if kit.memory is None:  # a run row still running has no finish time
        assert [by_id[i].finished_at for i in ids[1:]] == [None, None]
    assert (kit.schedule(sid).last_status, kit.schedule(sid).last_run_at) == ("running", NOW)


def test_a_caught_up_claim_writes_one_row_per_occurrence(kit: Kit) -> None:
    """The plan of a schedule four occurrences behind (``catch_up="latest"``), claimed:
    each occurrence has its row, the three folded into the run of the fourth too."""
    from django_htask.node.planning import plan, schedule_run

    sid, row = due_schedule(kit)
    due = [row.next_run_at + timedelta(minutes=i) for i in range(4)]
    now = due[-1] + timedelta(seconds=2)
    decided = plan(row, "n1", now, [], 100)
    assert decided.to_run == due[-1:]
    started = [schedule_run(row, "n1", RunStatus.RUNNING, w, now) for w in decided.to_run]
    ids = kit.store.claim_occurrence("n1", row, decided.next_run_at, now, decided.runs + started)
    assert ids is not None and len(ids) == 4
    rows = sorted(kit.runs(schedule_id=sid), key=lambda r: r.scheduled_for)
    assert [(r.scheduled_for, r.status) for r in rows] == [
        *((w, "skipped") for w in due[:-1]),
        (due[-1], "running"),
    ]
    folded = f"folded into the run of {due[-1].isoformat()} (catch_up=latest)"
    assert [r.error for r in rows[:-1]] == [folded] * 3
    assert kit.schedule(sid).last_status == "running"


def test_a_run_going_on_another_live_node_skips_the_next_occurrence_naming_it(
    kit: Kit,
) -> None:
    """``overlap="skip"``: a run of the schedule still going on another live node (one
    killed, say, not yet declared dead) skips the occurrence, and its row names that
    node; a node that stopped does not count."""
    from django_htask.node.planning import plan

    sid, row = due_schedule(kit)
    kit.register("b", "gone")
    for node in ("b", "gone"):
        started = outcome({"schedule_id": sid}, node=node, status=RunStatus.RUNNING)
        kit.store.claim_occurrence(node, row, row.next_run_at, NOW, [started])
        row = kit.store.get_schedule(sid) or row
    kit.store.stop_node("gone", NOW)
    busy = kit.store.running_elsewhere(sid, "n1", NOW - timedelta(seconds=60))
    assert busy == ["b"]
    assert kit.store.running_elsewhere(sid, "b", NOW - timedelta(seconds=60)) == []
    decided = plan(row, "n1", NOW + timedelta(minutes=1), busy, 100)
    assert decided.to_run == []
    [skipped] = decided.runs
    assert (skipped.status, skipped.error) == (
        RunStatus.SKIPPED,
        "skipped: the previous run was still running (on node b) (overlap=skip)",
    )


def test_a_claim_without_runs_moves_the_schedule_and_says_so(kit: Kit) -> None:
    sid, row = due_schedule(kit)
    later = row.next_run_at + timedelta(minutes=1)
    assert kit.store.claim_occurrence("n1", row, later, NOW, []) == []
    assert kit.schedule(sid).next_run_at == later
    assert kit.runs(schedule_id=sid) == []
    assert kit.store.claim_occurrence("n1", row, later, NOW, []) is None  # row moved on


def test_a_broken_schedule_stops_with_its_reason_and_a_failed_run(kit: Kit) -> None:
    sid = kit.add_schedule()
    kit.register("n1")
    row = kit.store.get_schedule(sid)
    assert row is not None
    run = outcome({"schedule_id": sid}, status=RunStatus.FAILED, error="broken: bad")
    assert not kit.store.mark_broken("n1", sid, row.version + 1_000_000, "bad", run)
    assert kit.store.mark_broken("n1", sid, row.version, "bad", run)
    broken = kit.schedule(sid)
    assert (broken.next_run_at, broken.broken, broken.last_status) == (None, "bad", "failed")
    assert [r.error for r in kit.runs(schedule_id=sid)] == ["broken: bad"]
    long = "x" * (BROKEN_MAX - 1) + "yz"  # cut to the same length on every store
    assert kit.store.mark_broken("n1", sid, None, long, run)
    assert kit.schedule(sid).broken == long[:BROKEN_MAX]


# -- claims ------------------------------------------------------------------------------
def test_claims_take_due_tasks_by_priority_then_age_and_start_them(kit: Kit) -> None:
    kit.register("n1")
    late = kit.add_tasks(2, NOW - timedelta(seconds=1))
    early = kit.add_tasks(2, NOW - timedelta(seconds=5))
    urgent = kit.add_tasks(1, NOW, priority=5)
    future = kit.add_tasks(1, NOW + timedelta(seconds=1))
    first = kit.store.start_tasks("n1", NOW, 3, LEASE)
    assert [t.id for t in first] == [*urgent, *early]
    second = kit.store.start_tasks("n1", NOW, 3, LEASE)
    assert [t.id for t in second] == late
    for task_id in [*late, *early, *urgent]:
        task = kit.task(task_id)
        assert (task.status, task.attempts, task.locked_by) == (TaskStatus.RUNNING, 1, "n1")
        assert (task.started_at, task.lease_expires_at) == (NOW, LEASE)
    assert kit.task(future[0]).status == TaskStatus.PENDING
    assert kit.store.task_outlook(NOW) == (False, NOW + timedelta(seconds=1))
    started = claimed_task(0, "n1", NOW, LEASE)  # the rule every store writes
    assert {k: getattr(kit.task(late[0]), k) for k in started} == started


def test_a_claim_writes_the_ends_of_the_tasks_the_node_still_runs_only(kit: Kit) -> None:
    """Of two tasks finished on n1, one was handed back meanwhile (its lease ran out and
    a reaper took it): the claim writing both ends writes the other's only. (On
    PostgreSQL and MySQL the fence's statement answers whether the node still runs them
    all; here it does not, and the tasks are read.)"""
    kit.register("n1", "n2")
    lost, kept = kit.add_tasks(2, max_attempts=3)
    kit.store.start_tasks("n1", NOW, 1, NOW + timedelta(seconds=1))
    kit.store.start_tasks("n1", NOW, 1, LEASE)
    later = NOW + timedelta(seconds=2)
    kit.register("n2", at=later)
    kit.store.reap("n2", later, NOW - timedelta(seconds=60), RETRY)  # n1 lives on
    assert (kit.task(lost).status, kit.task(lost).locked_by) == (TaskStatus.PENDING, None)
    runs_of_lost = len(kit.runs(task_id=lost))  # the reaper's record of the lost attempt
    finished = [outcome({"task_id": lost}), outcome({"task_id": kept})]
    assert kit.store.start_tasks("n1", later, 0, LEASE, finished=finished) == []
    assert kit.task(lost).status == TaskStatus.PENDING  # not written
    assert len(kit.runs(task_id=lost)) == runs_of_lost
    assert (kit.task(kept).status, kit.task(kept).node) == (TaskStatus.SUCCEEDED, "n1")
    assert kit.runs(task_id=kept) == []  # a success: on its row


@pytest.mark.parametrize("every", [False, True], ids=["successes-on-rows", "every-attempt"])
def test_which_ends_write_a_run_row(kit: Kit, settings: Any, every: bool) -> None:
    """The rule every store writes by (``rules.writes_run``): a task's failed attempt,
    retried or final, and its snooze write a run row; its success writes none (its row
    holds it: its node, start and end, read back as its last attempt) unless
    ``RECORD_EVERY_ATTEMPT`` is set. The readers' filter of those rows
    (``task_success_run``) matches no row but a success's."""
    if every:
        settings.HTASK = {**settings.HTASK, "RECORD_EVERY_ATTEMPT": True}
    kit.register("n1")
    ok, retried, failed, snoozed = kit.add_tasks(4, max_attempts=2)
    kit.store.start_tasks("n1", NOW, 4, LEASE)
    later = NOW + timedelta(seconds=30)
    finished = [
        outcome({"task_id": ok}, duration=1.0, result=b"\x01"),
        outcome({"task_id": retried}, status=RunStatus.FAILED, error="no", retry_at=later),
        outcome({"task_id": failed}, status=RunStatus.FAILED, error="no"),
        outcome({"task_id": snoozed}, status=RunStatus.SNOOZED, retry_at=later),
    ]
    kit.store.start_tasks("n1", NOW, 0, LEASE, finished=finished)
    written = [len(kit.runs(task_id=o.task_id)) for o in finished]
    assert written == [int(writes_run(o, every)) for o in finished] == [int(every), 1, 1, 1]
    [success] = kit.attempts(ok)
    assert (success.status, success.node, success.attempt, success.duration) == (
        RunStatus.SUCCEEDED,
        "n1",
        1,
        1.0,
    )
    assert (success.started_at, success.finished_at) == (NOW, NOW + timedelta(seconds=1))
    assert [r.status for r in kit.attempts(failed)] == [RunStatus.FAILED]
    if kit.memory is None:
        from django_htask.models import Run
        from django_htask.querysets import task_success_run

        assert Run.objects.filter(task_success_run()).count() == int(every)


def test_claims_serve_only_their_queues_and_backend(kit: Kit) -> None:
    kit.register("n1")
    default, mails = kit.add_tasks(1), kit.add_tasks(1, queue_name="emails")
    only_mails = Serving(QueueFilter.of(["emails"]))
    assert kit.store.task_outlook(NOW, only_mails) == (True, None)
    assert [t.id for t in kit.store.start_tasks("n1", NOW, 5, LEASE, serving=only_mails)] == mails
    other_backend = Serving(backend="other")
    assert kit.store.start_tasks("n1", NOW, 5, LEASE, serving=other_backend) == []
    assert [t.id for t in kit.store.start_tasks("n1", NOW, 5, LEASE)] == default


def test_results_are_written_with_the_next_claim_and_retries_wait(kit: Kit) -> None:
    kit.register("n1")
    done, retried = kit.add_tasks(2, max_attempts=3)
    kit.store.start_tasks("n1", NOW, 2, LEASE)
    later = NOW + timedelta(seconds=30)
    finished = [
        outcome({"task_id": done}),
        outcome({"task_id": retried}, status=RunStatus.FAILED, error="no", retry_at=later),
    ]
    assert kit.store.start_tasks("n1", NOW, 5, LEASE, finished=finished) == []
    assert (kit.task(done).status, kit.task(done).locked_by) == (TaskStatus.SUCCEEDED, None)
    waiting = kit.task(retried)
    assert (waiting.status, waiting.run_at, waiting.last_error) == (TaskStatus.PENDING, later, "no")
    assert (len(kit.runs(task_id=done)), len(kit.runs(task_id=retried))) == (0, 1)


def test_a_finished_task_s_result_is_written_on_its_row_and_none_leaves_it_empty(
    kit: Kit,
) -> None:
    kit.register("n1")
    valued, empty, retried = kit.add_tasks(3, max_attempts=2)
    kit.store.start_tasks("n1", NOW, 3, LEASE)
    stored = bytes(range(256)) * 3  # every byte value, past a JSON string's escapes
    later = NOW + timedelta(seconds=30)
    finished = [
        outcome({"task_id": valued}, result=stored),
        outcome({"task_id": empty}),
        outcome({"task_id": retried}, status=RunStatus.FAILED, error="no", retry_at=later),
    ]
    kit.store.record("n1", finished)
    for o in finished:  # the rule every store writes
        ended = ended_task(o)
        row = kit.task(o.task_id)
        assert {k: getattr(row, k) for k in ended if k != "result"} == {
            k: v for k, v in ended.items() if k != "result"
        }
    assert bytes(kit.task(valued).result) == stored
    assert kit.task(empty).result is None
    assert (kit.task(retried).status, kit.task(retried).result) == (TaskStatus.PENDING, None)
    assert kit.runs(task_id=valued) == []


def test_finished_tasks_whose_results_pass_a_statement_s_size_are_all_written(
    kit: Kit,
) -> None:
    """24 results of 1 MiB, the size a result may have by default, written at once:
    more than MariaDB takes in one statement by default (``max_allowed_packet``)."""
    kit.register("n1")
    ids = kit.add_tasks(24)
    kit.store.start_tasks("n1", NOW, 24, LEASE)
    results = {i: bytes([n]) * (1 << 20) for n, i in enumerate(ids)}
    kit.store.record("n1", [outcome({"task_id": i}, result=results[i]) for i in ids])
    for i in ids:
        assert kit.task(i).status == TaskStatus.SUCCEEDED
        assert bytes(kit.task(i).result) == results[i]


def test_timeouts_travel_with_the_started_task_and_the_schedule_row(kit: Kit) -> None:
    kit.register("n1")
    timed, plain = kit.add_tasks(1, timeout=2.5) + kit.add_tasks(1)
    started = {t.id: t.timeout for t in kit.store.start_tasks("n1", NOW, 5, LEASE)}
    assert started == {timed: 2.5, plain: None}
    sid = kit.add_schedule(timeout=30.0)
    row = kit.store.get_schedule(sid)
    assert row is not None and row.timeout == 30.0


def test_retry_policies_travel_with_the_started_task_and_the_schedule_row(kit: Kit) -> None:
    kit.register("n1")
    policy = {
        "retry_kind": "linear",
        "retry_backoff": 2.0,
        "retry_backoff_max": 30.0,
        "retry_jitter": "equal",
        "retry_on": "builtins.OSError",
        "give_up_on": "builtins.ConnectionRefusedError",
    }
    own, plain = kit.add_tasks(1, **policy) + kit.add_tasks(1)
    started = {t.id: t.retry for t in kit.store.start_tasks("n1", NOW, 5, LEASE)}
    assert started == {
        own: RetryColumns(
            "linear", 30.0, "equal", "builtins.OSError", "builtins.ConnectionRefusedError", 2.0
        ),
        plain: DEFAULT_RETRY,
    }
    del policy["retry_backoff"]  # a schedule's is a field of its row
    row = kit.store.get_schedule(kit.add_schedule(retry_backoff=4.0, **policy))
    assert row is not None and row.retry_backoff == 4.0
    assert row.retry.policy(row.retry_backoff, 3600) == RetryPolicy(
        4.0,
        30.0,
        kind="linear",
        jitter="equal",
        retry_on=(OSError,),
        give_up_on=(ConnectionRefusedError,),
    )


def test_a_lost_task_is_retried_after_its_own_policys_backoff(kit: Kit) -> None:
    later = NOW + timedelta(seconds=61)
    kit.register("dead")
    kit.register("alive", at=later - timedelta(seconds=1))
    fixed = kit.add_tasks(1, max_attempts=3, retry_kind="fixed", retry_backoff=3.0)
    plain = kit.add_tasks(1, max_attempts=3)
    kit.store.start_tasks("dead", NOW, 10, NOW + timedelta(seconds=30))
    kit.store.heartbeat("alive", later, later + timedelta(seconds=30))
    kit.store.reap("alive", later, later - timedelta(seconds=60), RETRY)
    assert kit.task(fixed[0]).run_at == later + timedelta(seconds=3)
    assert kit.task(plain[0]).run_at == later + timedelta(seconds=10)  # RETRY's backoff


# -- snoozes (docs/retries.md, "Snooze") ----------------------------------------------------
def snoozed(task_id: int, until: datetime) -> RunOutcome:
    """The outcome of a task's attempt that snoozed until ``until``."""
    return outcome({"task_id": task_id}, status=RunStatus.SNOOZED, error="snoozed", retry_at=until)


def test_a_snoozed_task_is_pending_again_its_attempt_not_counted_its_error_kept(
    kit: Kit,
) -> None:
    kit.register("n1")
    dozing, done, retried = kit.add_tasks(3, max_attempts=3)
    kit.store.start_tasks("n1", NOW, 3, LEASE)
    failed = outcome({"task_id": dozing}, status=RunStatus.FAILED, error="no", retry_at=NOW)
    [again] = kit.store.start_tasks("n1", NOW, 1, LEASE, finished=[failed])
    assert (again.id, again.attempts, again.snoozes, again.max_snoozes) == (dozing, 2, 0, None)
    later = NOW + timedelta(seconds=30)
    finished = [  # a finish, a retry and a snooze: each database's statements for each
        snoozed(dozing, later),
        outcome({"task_id": done}),
        outcome({"task_id": retried}, status=RunStatus.FAILED, error="no", retry_at=later),
    ]
    assert kit.store.start_tasks("n1", NOW, 0, LEASE, finished=finished) == []
    written = snoozed_task(later, 2, 0)  # the rule every store writes
    row = kit.task(dozing)
    assert {k: getattr(row, k) for k in written} == written
    assert (row.status, row.attempts, row.snoozes) == (TaskStatus.PENDING, 1, 1)
    assert (row.last_error, row.started_at) == ("no", NOW)  # a snooze ends no attempt
    assert [r.status for r in kit.runs(task_id=dozing)] == ["failed", "snoozed"]
    assert (kit.task(done).status, kit.task(retried).status) == ("succeeded", "pending")
    [third] = kit.store.start_tasks("n1", later, 1, later + timedelta(seconds=60))
    assert (third.id, third.attempts, third.snoozes) == (dozing, 2, 1)


def test_snoozed_tasks_are_each_written_with_their_own_time(kit: Kit) -> None:
    """More than one statement's worth, each due at its own time."""
    kit.register("n1")
    ids = kit.add_tasks(120)
    kit.store.start_tasks("n1", NOW, 120, LEASE)
    until = {i: NOW + timedelta(seconds=n + 1) for n, i in enumerate(ids)}
    kit.store.record("n1", [snoozed(i, until[i]) for i in ids])
    rows = {i: kit.task(i) for i in ids}
    assert {i: (r.status, r.run_at, r.attempts, r.snoozes) for i, r in rows.items()} == {
        i: (TaskStatus.PENDING, until[i], 0, 1) for i in ids
    }


def test_max_snoozes_travels_with_the_started_task(kit: Kit) -> None:
    kit.register("n1")
    own, plain = kit.add_tasks(1, max_snoozes=3) + kit.add_tasks(1)
    started = {t.id: t.max_snoozes for t in kit.store.start_tasks("n1", NOW, 5, LEASE)}
    assert started == {own: 3, plain: None}


def test_aborts_list_the_running_jobs_of_a_node_asked_to_stop(kit: Kit) -> None:
    kit.register("n1", "n2")
    mine, other, untouched = kit.add_tasks(3)
    kit.store.start_tasks("n1", NOW, 1, LEASE)
    kit.store.start_tasks("n2", NOW, 1, LEASE)
    kit.store.start_tasks("n1", NOW, 1, LEASE)
    assert kit.store.aborts("n1") == []
    sid = kit.add_schedule()
    run_id = kit.store.start_schedule_run(
        "n1", outcome({"schedule_id": sid}, status=RunStatus.RUNNING)
    )
    assert kit.request_abort(task_id=mine)
    assert kit.request_abort(task_id=other)
    assert kit.request_abort(run_id=run_id)
    assert not kit.request_abort(run_id=run_id)  # asked already
    assert kit.store.aborts("n1") == [("task", mine), ("run", run_id)]
    assert kit.store.aborts("n2") == [("task", other)]
    kit.store.record("n1", [outcome({"task_id": mine}, status=RunStatus.FAILED, error="x")])
    done = outcome({"run_id": run_id, "schedule_id": sid}, status=RunStatus.FAILED)
    kit.store.record("n1", [done])
    assert kit.store.aborts("n1") == []  # finished: nothing left to stop
    assert kit.task(untouched).status == TaskStatus.RUNNING


def test_a_task_aborted_on_a_node_that_died_is_not_retried(kit: Kit) -> None:
    later = NOW + timedelta(minutes=5)
    kit.register("n1")
    kit.register("n2", at=later - timedelta(seconds=1))  # punctual: no database outage
    aborted, other = kit.add_tasks(2, max_attempts=3)
    kit.store.start_tasks("n1", NOW, 2, LEASE)
    assert kit.request_abort(task_id=aborted)
    kit.store.heartbeat("n2", later, later + timedelta(seconds=60))
    kit.store.reap("n2", later, later - timedelta(seconds=60), RETRY)
    assert kit.task(aborted).status == TaskStatus.FAILED  # its abort stands
    assert kit.task(other).status == TaskStatus.PENDING  # retried by its policy


# -- failures ------------------------------------------------------------------------------
def test_a_database_away_raises_store_unavailable_with_the_drivers_error(kit: Kit) -> None:
    kit.register("n1")
    kit.add_tasks(1)
    calls = {
        "heartbeat": lambda: kit.store.heartbeat("n1", NOW, LEASE),
        "start_tasks": lambda: kit.store.start_tasks("n1", NOW, 5, LEASE),
        "load_schedules": kit.store.load_schedules,
        "count_pending_tasks": kit.store.count_pending_tasks,
        # a method of a mixin (PostgreSQL's and MySQL's reaper) translates as well
        "reap": lambda: kit.store.reap("n1", NOW, NOW - timedelta(seconds=60), RETRY),
    }
    with kit.outage() as driver_error:
        for name, call in calls.items():
            with pytest.raises(StoreUnavailable, match=r"^connection refused$") as raised:
                call()
            assert type(raised.value.__cause__) is driver_error, name
            assert raised.value.reason == f"{driver_error.__name__}: connection refused"
        kit.store.close()  # what the node does next: dropping a connection never fails
    kit.store.refresh()
    assert kit.store.count_pending_tasks() == 1  # back: nothing was written meanwhile
    assert [t.id for t in kit.store.start_tasks("n1", NOW, 5, LEASE)] != []


def test_attempt_gives_code_of_the_layer_above_the_stores_errors(kit: Kit) -> None:
    """What a node runs for its caller on the store's database (the code-defined
    schedules' sync) fails as the store does; the store's other errors pass as they are."""
    from django.db import OperationalError

    def fails(error: Exception) -> Any:
        def call() -> None:
            raise error

        return call

    assert kit.store.attempt(lambda: 42) == 42
    if kit.memory is None:  # a driver's error is a database store's to turn
        with pytest.raises(StoreUnavailable, match=r"^database is locked$") as raised:
            kit.store.attempt(fails(OperationalError("database is locked")))
        assert isinstance(raised.value.__cause__, OperationalError)
    for error in (NotMigrated("run migrate"), NodeFenced("n1", None), ValueError("bad")):
        with pytest.raises(type(error)) as passed:
            kit.store.attempt(fails(error))
        assert passed.value is error


# -- fencing and reaping -------------------------------------------------------------------
def test_the_writes_of_a_node_declared_dead_are_refused(kit: Kit) -> None:
    kit.register("n1")
    kit.add_tasks(1)
    sid = kit.add_schedule()
    assert kit.store.declare_dead(["n1"], NOW) == 1
    row = kit.store.get_schedule(sid)
    assert row is not None
    with pytest.raises(NodeFenced, match="n1 was declared dead"):
        kit.store.start_tasks("n1", NOW, 5, LEASE)
    with pytest.raises(NodeFenced):
        kit.store.claim_occurrence("n1", row, None, NOW, [])
    with pytest.raises(NodeFenced):
        kit.store.heartbeat("n1", NOW, LEASE)
    with pytest.raises(NodeFenced):
        kit.store.record("n1", [outcome({"schedule_id": sid})])
    with pytest.raises(NodeFenced):
        kit.store.start_tasks("never-registered", NOW, 5, LEASE)
    assert kit.node("n1").stopped_at == NOW  # the heartbeat did not revive it


def test_the_reaper_hands_back_what_a_dead_node_held(kit: Kit) -> None:
    later = NOW + timedelta(seconds=61)
    kit.register("dead")
    kit.register("alive", at=later - timedelta(seconds=1))  # punctual: no database outage
    retried, last = kit.add_tasks(1, max_attempts=2), kit.add_tasks(1, priority=-1)
    waiting = kit.add_tasks(1, NOW + timedelta(seconds=5))
    kit.store.start_tasks("dead", NOW, 10, NOW + timedelta(seconds=30))
    kit.store.heartbeat("alive", later, later + timedelta(seconds=30))
    assert kit.store.reap("alive", later, later - timedelta(seconds=60), RETRY) == 3
    again = kit.task(retried[0])
    assert (again.status, again.attempts, again.locked_by) == (TaskStatus.PENDING, 1, None)
    assert again.run_at == later + timedelta(seconds=10)
    failed = kit.task(last[0])
    assert (failed.status, failed.attempts) == (TaskStatus.FAILED, 1)
    assert "stopped answering during attempt 1 of 1" in failed.last_error
    assert (kit.task(waiting[0]).status, kit.task(waiting[0]).attempts) == ("pending", 0)
    assert kit.node("dead").stopped_at == later and kit.node("alive").stopped_at is None
    assert list(kit.store.live_nodes(later - timedelta(seconds=60))) == ["alive"]
    assert kit.store.reap("alive", later, later - timedelta(seconds=60), RETRY) == 0


def test_tasks_claimed_for_a_buffer_are_handed_back_uncharged_unless_begun(kit: Kit) -> None:
    """Where the store buffers (the database stores), a claim takes tasks beyond its
    free workers with no start time; the reaper hands back a dead node's buffered tasks
    as they were, and charges the attempt of those begun (marked by a later claim, or
    ended). The in-memory store ignores the buffer asked for."""
    later = NOW + timedelta(seconds=61)
    kit.register("dead")
    kit.register("alive", at=later - timedelta(seconds=1))
    first, begun, ended, waiting = kit.add_tasks(4)
    started = kit.store.start_tasks("dead", NOW, 1, NOW + timedelta(seconds=30), buffer=3)
    if not kit.store.buffers:
        assert ([t.id for t in started], started.buffered) == ([first], frozenset())
        return
    assert [t.id for t in started] == [first, begun, ended, waiting]
    assert started.buffered == {begun, ended, waiting}
    assert kit.task(first).started_at == NOW
    row = kit.task(waiting)
    assert (row.status, row.attempts, row.locked_by, row.started_at) == ("running", 1, "dead", None)
    at = NOW + timedelta(seconds=1)
    end = outcome(
        {"task_id": ended}, node="dead", started_at=at, finished_at=at, start_unwritten=True
    )
    kit.store.start_tasks("dead", at, 0, LEASE, finished=[end], begun=[(begun, at)])
    assert (kit.task(begun).started_at, kit.task(begun).status) == (at, "running")
    assert (kit.task(ended).started_at, kit.task(ended).status) == (at, "succeeded")
    kit.store.heartbeat("alive", later, later + timedelta(seconds=30))
    assert kit.store.reap("alive", later, later - timedelta(seconds=60), RETRY) == 4
    for task_id in (first, begun):
        row = kit.task(task_id)
        assert (row.status, row.attempts) == ("failed", 1)
        assert "stopped answering during attempt 1 of 1" in row.last_error
    row = kit.task(waiting)
    assert (row.status, row.attempts, row.locked_by, row.last_error) == ("pending", 0, None, "")
    assert kit.runs(task_id=waiting) == []
    # Handed to a node once, it is never buffered again: a crash would now charge it.
    assert kit.store.start_tasks("alive", later, 0, LEASE, buffer=5) == []
    assert [t.id for t in kit.store.start_tasks("alive", later, 1, LEASE, buffer=5)] == [waiting]


def test_a_node_leaving_runs_going_is_dead_only_from_the_instant_it_names(kit: Kit) -> None:
    kit.register("leaving", "other")
    sid = kit.add_schedule()
    row = kit.store.get_schedule(sid)
    assert row is not None
    [run_id] = kit.store.claim_occurrence(
        "leaving", row, None, NOW, [outcome({"schedule_id": sid}, node="leaving", status="running")]
    ) or [0]
    [started, queued] = kit.add_tasks(2, max_attempts=2)
    kit.store.start_tasks("leaving", NOW, 2, LEASE)
    dead_at = NOW + timedelta(seconds=2)
    left = [
        Abandoned("interrupted", True, run_id=run_id),
        Abandoned("interrupted", True, task_id=started, retry_at=NOW + timedelta(seconds=1)),
        Abandoned("not run", False, task_id=queued),
    ]
    kit.store.abandon("leaving", NOW, left, dead_at, dead_at - timedelta(seconds=60))
    assert (kit.task(started).status, kit.task(started).run_at) == ("pending", dead_at)
    assert (kit.task(queued).status, kit.task(queued).attempts) == ("pending", 0)
    assert kit.store.running_elsewhere(sid, "other", NOW - timedelta(seconds=60)) == ["leaving"]
    after = dead_at + timedelta(seconds=1)
    kit.store.heartbeat("other", after, after + timedelta(seconds=60))
    kit.store.reap("other", after, after - timedelta(seconds=60), RETRY)
    [run] = kit.runs(schedule_id=sid)
    assert (run.status, run.error) == ("failed", "interrupted")


def test_nodes_on_a_host_and_their_queues(kit: Kit) -> None:
    kit.store.register_node("a", "h1", 10, "0", NOW, QueueFilter.of(["emails"]))
    kit.store.register_node("b", "h2", 11, "0", NOW)
    assert kit.store.nodes_on_host("h1") == [("a", 10)]
    live = kit.store.live_nodes(NOW - timedelta(seconds=60))
    assert {node: str(queues) for node, (_beat, queues) in live.items()} == {
        "a": "emails",
        "b": "*",
    }


def test_a_heartbeat_writes_the_stuck_threads_and_a_registration_clears_them(
    kit: Kit,
) -> None:
    kit.register("n1")
    assert kit.node("n1").stuck_threads == 0
    later = NOW + timedelta(seconds=5)
    kit.store.heartbeat("n1", later, LEASE, stuck=3)
    node = kit.node("n1")
    assert (node.stuck_threads, node.last_heartbeat) == (3, later)
    kit.store.heartbeat("n1", later, LEASE, stuck=1)  # one of them returned
    assert kit.node("n1").stuck_threads == 1
    kit.store.heartbeat("n1", later, LEASE)
    assert kit.node("n1").stuck_threads == 0
    kit.store.heartbeat("n1", later, LEASE, stuck=2)
    kit.register("n1", at=later)  # its id taken again (``--node-id``): a new process
    assert kit.node("n1").stuck_threads == 0


def test_a_heartbeat_renews_the_leases_that_expire_before_renew_below(kit: Kit) -> None:
    """A lease taken less than a heartbeat interval ago is left as it is (its row not
    written); without ``renew_below`` every lease of the node that would be extended is
    renewed."""
    kit.register("n1")
    kit.register("n2")
    old, new, elsewhere = kit.add_tasks(3)
    kit.store.start_tasks("n1", NOW, 1, LEASE)  # expires NOW + 60 s
    later = NOW + timedelta(seconds=5)
    kit.store.start_tasks("n1", later, 1, later + timedelta(seconds=60))
    kit.store.start_tasks("n2", NOW, 1, LEASE)
    assert {kit.task(t).locked_by for t in (old, new, elsewhere)} == {"n1", "n2"}
    beat = NOW + timedelta(seconds=11)
    until = beat + timedelta(seconds=60)
    renewed = kit.store.heartbeat("n1", beat, until, renew_below=until - timedelta(seconds=10))
    assert renewed == 1
    assert kit.task(old).lease_expires_at == until
    assert kit.task(new).lease_expires_at == later + timedelta(seconds=60)  # 54 s left
    assert kit.task(elsewhere).lease_expires_at == LEASE  # another node's
    assert kit.store.heartbeat("n1", beat, until) == 1  # the other has that lease already
    assert kit.task(new).lease_expires_at == until


def test_a_node_is_absent_once_no_session_holds_its_presence(kit: Kit) -> None:
    """Where several nodes share the database, the connection that registers a node,
    and each of its heartbeats, hold its presence: a node whose connections ended (its
    process killed), or that never registered, is absent; one whose connection lives
    on (paused, however late) is not. A database of one host's processes (SQLite)
    cannot tell: nobody is absent."""
    import time

    kit.register("presence-kept", "presence-ended")
    everyone = ["presence-ended", "presence-kept", "presence-unknown"]
    if not kit.store.supports_several_nodes:
        assert kit.store.absent(everyone) == []
        return
    assert kit.store.absent(everyone) == ["presence-unknown"]
    assert kit.store.absent([]) == []
    kit.end_sessions("presence-ended")
    # The connection that held both is gone: the kept node beats again, as a node does
    # every interval. The server ends the old session a moment after the close, so a
    # beat before that cannot take the lock the old session still holds: the next does.
    deadline = time.monotonic() + 5
    while True:
        if kit.memory is None:
            kit.store.heartbeat("presence-kept", NOW, LEASE)
        if kit.store.absent(everyone) == ["presence-ended", "presence-unknown"]:
            break
        assert time.monotonic() < deadline, kit.store.absent(everyone)
        time.sleep(0.05)


# -- runs, counts, stopping, pruning ---------------------------------------------------------
def test_a_schedules_last_status_is_its_latest_runs_whatever_ends_last(kit: Kit) -> None:
    """Two runs of one schedule, the later one ending first: the earlier one's end,
    written after, leaves the later one's status (every store, one rule)."""
    kit.register("n1")
    sid = kit.add_schedule()
    later_start = NOW + timedelta(minutes=1)
    earlier = kit.store.start_schedule_run("n1", outcome({"schedule_id": sid}, status="running"))
    later = kit.store.start_schedule_run(
        "n1", outcome({"schedule_id": sid}, status="running", started_at=later_start)
    )
    ends = [
        outcome({"run_id": later, "schedule_id": sid}, started_at=later_start),
        outcome(
            {"run_id": earlier, "schedule_id": sid},
            status=RunStatus.FAILED,
            error="slow",
            finished_at=later_start + timedelta(minutes=5),
        ),
    ]
    for end in ends:
        kit.store.record("n1", [end])
    assert (kit.schedule(sid).last_status, kit.schedule(sid).last_run_at) == (
        "succeeded",
        later_start,
    )


def test_a_retry_run_is_started_then_recorded_and_fenced(kit: Kit) -> None:
    kit.register("n1")
    sid = kit.add_schedule()
    retry = outcome({"schedule_id": sid}, status=RunStatus.RUNNING, attempt=2)
    run_id = kit.store.start_schedule_run("n1", retry)
    [running] = kit.runs(schedule_id=sid)
    assert (running.status, running.attempt) == ("running", 2)
    done = outcome({"run_id": run_id, "schedule_id": sid}, status=RunStatus.FAILED, error="no")
    kit.store.record("n1", [done])
    [failed] = kit.runs(schedule_id=sid)
    assert (failed.status, failed.error) == ("failed", "no")
    assert kit.schedule(sid).last_status == "failed"
    kit.store.declare_dead(["n1"], NOW)
    with pytest.raises(NodeFenced):
        kit.store.start_schedule_run("n1", retry)


def test_pending_tasks_are_counted_whatever_their_due_time(kit: Kit) -> None:
    kit.register("n1")
    assert kit.store.count_pending_tasks() == 0
    kit.add_tasks(2)
    kit.add_tasks(1, NOW + timedelta(days=1))
    kit.store.start_tasks("n1", NOW, 1, LEASE)
    assert kit.store.count_pending_tasks() == 2


def test_a_stopped_node_is_no_longer_live_and_stopping_twice_keeps_the_first_time(
    kit: Kit,
) -> None:
    kit.register("n1", "n2")
    kit.store.stop_node("n1", NOW)
    kit.store.stop_node("n1", NOW + timedelta(seconds=5))
    assert kit.node("n1").stopped_at == NOW
    assert list(kit.store.live_nodes(NOW - timedelta(seconds=60))) == ["n2"]


def test_taking_over_an_id_that_never_stopped_hands_back_what_it_held(kit: Kit) -> None:
    """``runscheduler --node-id web-1`` killed, then started again under the same id."""
    kit.register("web-1", "other")
    started, claimed = kit.add_tasks(2, max_attempts=2)
    kit.store.start_tasks("web-1", NOW, 1, LEASE)  # the first one started
    assert kit.task(started).locked_by == "web-1"
    sid = kit.add_schedule()
    row = kit.store.get_schedule(sid)
    assert row is not None
    running = outcome({"schedule_id": sid}, node="web-1", status=RunStatus.RUNNING)
    kit.store.claim_occurrence("web-1", row, None, NOW, [running])
    later = NOW + timedelta(seconds=2)  # well within the node timeout
    assert kit.store.take_over("web-1", later, later - timedelta(seconds=60), RETRY) >= 2
    again = kit.task(started)
    assert (again.status, again.attempts, again.locked_by) == (TaskStatus.PENDING, 1, None)
    assert "stopped answering during attempt 1 of 2" in again.last_error
    assert (kit.task(claimed).status, kit.task(claimed).attempts) == (TaskStatus.PENDING, 0)
    [run] = kit.runs(schedule_id=sid)
    assert run.status == "failed"
    assert kit.node("other").stopped_at is None  # only that id
    kit.register("web-1", at=later)  # the new process registers afresh
    assert "web-1" in kit.store.live_nodes(later - timedelta(seconds=60))
    kit.store.stop_node("web-1", later)  # a clean stop: nothing to take over next time
    assert kit.store.take_over("web-1", later, later - timedelta(seconds=60), RETRY) == 0
    assert kit.node("web-1").stopped_at == later


# -- keys: one pending task per key ------------------------------------------------------------
def test_a_key_keeps_one_pending_task_whatever_on_conflict_says(kit: Kit) -> None:
    from django_htask.engine import encode_call
    from django_htask.exceptions import DuplicateKey

    def payload(task_id: int) -> bytes:
        return bytes(kit.task(task_id).payload)

    first = kit.add_keyed("k", 1, queue_name="a")
    assert kit.add_keyed("k", 2, queue_name="b") == first  # ignore
    assert (payload(first), kit.task(first).queue_name) == (encode_call(ADD, (1,), {}), "a")
    with pytest.raises(DuplicateKey, match=f"'k' is taken: pending task {kit.task(first).token}"):
        kit.add_keyed("k", 3, on_conflict="raise")
    assert kit.add_keyed("k", 4, on_conflict="replace", queue_name="b", max_attempts=3) == first
    moved = kit.task(first)
    assert (moved.queue_name, moved.max_attempts, moved.status) == ("b", 3, TaskStatus.PENDING)
    assert payload(first) == encode_call(ADD, (4,), {})
    assert kit.store.count_pending_tasks() == 1
    assert kit.store.task_outlook(NOW) == (True, None)


def superseded_pair(kit: Kit, **fields: Any) -> tuple[int, int]:
    """A keyed task running on n1, and a newer pending task with its key."""
    kit.register("n1")
    old = kit.add_keyed("k", 1, **fields)
    [started] = kit.store.start_tasks("n1", NOW, 1, LEASE)
    assert started.id == old
    new = kit.add_keyed("k", 2, on_conflict="raise")  # the key is free while old runs
    assert new != old
    return old, new


def assert_superseded(kit: Kit, old: int, new: int) -> None:
    """``old`` was not put back: cancelled, naming ``new``, which stands, pending."""
    gone, stands = kit.task(old), kit.task(new)
    assert (gone.status, gone.locked_by) == (TaskStatus.CANCELLED, None)
    assert gone.last_error == f"superseded by pending task {stands.token} with the same key"
    assert gone.finished_at is not None
    assert (stands.status, stands.run_at, stands.attempts) == (TaskStatus.PENDING, NOW, 0)


def test_a_retry_is_superseded_by_a_newer_pending_task_with_its_key(kit: Kit) -> None:
    old, new = superseded_pair(kit, max_attempts=3)
    later = NOW + timedelta(seconds=30)
    failed = outcome({"task_id": old}, status=RunStatus.FAILED, error="no", retry_at=later)
    kit.store.record("n1", [failed])
    assert_superseded(kit, old, new)
    assert [r.error for r in kit.runs(task_id=old)] == ["no"]  # its attempt is recorded


def test_a_retry_without_a_newer_pending_task_keeps_its_key(kit: Kit) -> None:
    kit.register("n1")
    old = kit.add_keyed("k", 1, max_attempts=3)
    kit.store.start_tasks("n1", NOW, 1, LEASE)
    later = NOW + timedelta(seconds=30)
    kit.store.record("n1", [outcome({"task_id": old}, status="failed", retry_at=later)])
    assert (kit.task(old).status, kit.task(old).run_at) == (TaskStatus.PENDING, later)
    assert kit.add_keyed("k", 2) == old  # still the key's pending task


def test_a_snoozed_task_is_superseded_by_a_newer_pending_task_with_its_key(kit: Kit) -> None:
    old, new = superseded_pair(kit)
    kit.store.record("n1", [snoozed(old, NOW + timedelta(seconds=30))])
    assert_superseded(kit, old, new)
    assert [r.status for r in kit.runs(task_id=old)] == ["snoozed"]


def test_a_snoozed_task_stays_the_pending_holder_of_its_key(kit: Kit) -> None:
    kit.register("n1")
    old = kit.add_keyed("k", 1)
    kit.store.start_tasks("n1", NOW, 1, LEASE)
    later = NOW + timedelta(seconds=30)
    kit.store.record("n1", [snoozed(old, later)])
    assert (kit.task(old).status, kit.task(old).run_at) == (TaskStatus.PENDING, later)
    assert kit.add_keyed("k", 2) == old


def test_a_reaped_task_is_superseded_by_a_newer_pending_task_with_its_key(kit: Kit) -> None:
    old, new = superseded_pair(kit, max_attempts=2)
    later = NOW + timedelta(seconds=61)
    kit.register("alive", at=later - timedelta(seconds=1))
    kit.store.heartbeat("alive", later, later + timedelta(seconds=30))
    assert kit.store.reap("alive", later, later - timedelta(seconds=60), RETRY) >= 2
    assert_superseded(kit, old, new)
    assert len(kit.runs(task_id=old)) == 1  # the crashed attempt's row


def test_a_task_taken_over_is_superseded_by_a_newer_pending_task_with_its_key(kit: Kit) -> None:
    old, new = superseded_pair(kit, max_attempts=2)
    later = NOW + timedelta(seconds=2)
    assert kit.store.take_over("n1", later, later - timedelta(seconds=60), RETRY) >= 1
    assert_superseded(kit, old, new)


@pytest.mark.parametrize("started", [True, False])
def test_a_task_handed_back_is_superseded_by_a_newer_pending_task_with_its_key(
    kit: Kit, started: bool
) -> None:
    old, new = superseded_pair(kit, max_attempts=2)
    dead_at = NOW + timedelta(seconds=2)
    retry_at = NOW + timedelta(seconds=1) if started else None
    left = [Abandoned("interrupted", started, task_id=old, retry_at=retry_at)]
    kit.store.abandon("n1", NOW, left, dead_at, dead_at - timedelta(seconds=60))
    assert_superseded(kit, old, new)


# -- locks and limits ------------------------------------------------------------------
def started_ids(kit: Kit, node: str, limit: int = 10, at: datetime = NOW, **kw: Any) -> list[int]:
    lease = at + timedelta(seconds=60)
    return [t.id for t in kit.store.start_tasks(node, at, limit, lease, **kw)]


def test_tasks_sharing_a_lock_start_one_at_a_time_in_due_order(kit: Kit) -> None:
    kit.register("n1", "n2")
    first = kit.add_tasks(1, NOW - timedelta(seconds=2), lock="account:7")
    second = kit.add_tasks(1, NOW - timedelta(seconds=1), lock="account:7")
    other = kit.add_tasks(1, NOW, lock="account:8")
    assert started_ids(kit, "n1") == [*first, *other]
    assert kit.store.task_outlook(NOW) == (False, None)  # the one waiting is not due
    assert started_ids(kit, "n2") == []  # held on another node
    done = [outcome({"task_id": first[0]}, gated=True)]
    assert started_ids(kit, "n1", finished=done) == second  # in the claim writing its end
    assert kit.task(second[0]).status == TaskStatus.RUNNING


def test_a_lock_is_free_again_once_its_holder_s_lease_expired(kit: Kit) -> None:
    kit.register("n1", "n2")
    held, waiting = kit.add_tasks(2, lock="l")
    assert [t.id for t in kit.store.start_tasks("n1", NOW, 5, LEASE)] == [held]
    expired = LEASE + timedelta(seconds=1)
    assert kit.store.task_outlook(LEASE) == (False, None)
    assert kit.store.task_outlook(expired) == (True, None)
    assert started_ids(kit, "n2", at=expired) == [waiting]


def test_a_later_task_of_a_lock_waits_behind_one_held_by_its_function_s_limit(kit: Kit) -> None:
    kit.register("n1")
    busy = kit.add_tasks(1, NOW - timedelta(seconds=3), max_running=1)
    assert started_ids(kit, "n1") == busy
    blocked = kit.add_tasks(1, NOW - timedelta(seconds=2), lock="l", max_running=1)
    behind = kit.add_tasks(1, NOW - timedelta(seconds=1), lock="l")
    assert started_ids(kit, "n1") == []
    assert kit.store.task_outlook(NOW) == (False, None)
    done = [outcome({"task_id": busy[0]}, gated=True)]
    assert started_ids(kit, "n1", finished=done) == blocked
    assert kit.task(behind[0]).status == TaskStatus.PENDING


def test_max_running_bounds_the_tasks_of_a_function_running_on_all_nodes(kit: Kit) -> None:
    kit.register("n1", "n2")
    ids = kit.add_tasks(5, max_running=2)
    assert started_ids(kit, "n1", 1) == ids[:1]
    assert started_ids(kit, "n2") == ids[1:2]
    assert started_ids(kit, "n1") == []
    assert kit.store.task_outlook(NOW) == (False, None)
    done = [outcome({"task_id": ids[0]}, gated=True)]
    assert started_ids(kit, "n1", finished=done) == ids[2:3]


def test_gated_tasks_are_weighed_first_and_plain_ones_fill_the_rest(kit: Kit) -> None:
    kit.register("n1")
    plain = kit.add_tasks(3, NOW - timedelta(seconds=5))
    locked = kit.add_tasks(2, NOW, lock="l")
    limited = kit.add_tasks(1, NOW, max_running=3)
    assert sorted(started_ids(kit, "n1", 4)) == sorted([locked[0], *limited, *plain[:2]])
    assert started_ids(kit, "n1", 4) == plain[2:]  # the other locked one still waits
    assert kit.task(locked[1]).status == TaskStatus.PENDING


def test_a_reaped_holder_releases_its_lock(kit: Kit) -> None:
    later = NOW + timedelta(seconds=61)
    kit.register("dead")
    kit.register("alive", at=later - timedelta(seconds=1))
    held, waiting = kit.add_tasks(2, lock="l", max_attempts=1)
    kit.store.start_tasks("dead", NOW, 5, NOW + timedelta(seconds=300))
    assert kit.store.task_outlook(later) == (False, None)  # lease unexpired: still held
    kit.store.heartbeat("alive", later, later + timedelta(seconds=30))
    kit.store.reap("alive", later, later - timedelta(seconds=60), RETRY)
    assert kit.task(held).status == TaskStatus.FAILED
    assert started_ids(kit, "alive", at=later) == [waiting]


# -- queues paused and limited ------------------------------------------------------------
def test_queue_states_are_read_as_operators_set_them(kit: Kit) -> None:
    assert kit.store.queue_states() == QueueStates()
    kit.set_queue("b", limit=3)
    kit.set_queue("a", paused=True)
    kit.set_queue("c", paused=True, limit=1)
    assert kit.store.queue_states() == QueueStates(frozenset({"a", "c"}), (("b", 3), ("c", 1)))
    kit.set_queue("c", paused=False, limit=None)
    assert kit.store.queue_states() == QueueStates(frozenset({"a"}), (("b", 3),))


def test_a_paused_queue_s_tasks_are_neither_claimed_nor_due(kit: Kit) -> None:
    kit.register("n1")
    slow = kit.add_tasks(2, queue_name="slow")
    locked = kit.add_tasks(1, queue_name="slow", lock="l")
    kit.add_tasks(1, NOW + timedelta(seconds=5), queue_name="slow")
    other = kit.add_tasks(1)
    paused = kit.set_queue("slow", paused=True)
    assert kit.store.task_outlook(NOW, paused) == (True, None)
    assert started_ids(kit, "n1", serving=paused) == other
    assert kit.store.task_outlook(NOW, paused) == (False, None)  # nothing to spin on
    assert started_ids(kit, "n1", serving=paused) == []
    resumed = kit.set_queue("slow", paused=False)
    assert kit.store.task_outlook(NOW, resumed) == (True, NOW + timedelta(seconds=5))
    assert sorted(started_ids(kit, "n1", serving=resumed)) == sorted([*slow, *locked])


def test_a_queue_limit_bounds_its_tasks_running_on_all_nodes(kit: Kit) -> None:
    kit.register("n1", "n2")
    limited = kit.add_tasks(4, NOW - timedelta(seconds=2), queue_name="q")
    locked = kit.add_tasks(1, NOW - timedelta(seconds=1), queue_name="q", lock="l")
    other = kit.add_tasks(2, NOW)
    serving = kit.set_queue("q", limit=2)
    assert started_ids(kit, "n1", 1, serving=serving) == locked  # a lock's weighed first
    assert sorted(started_ids(kit, "n2", serving=serving)) == sorted([limited[0], *other])
    assert started_ids(kit, "n1", serving=serving) == []  # two of q run: its limit
    assert kit.store.task_outlook(NOW, serving) == (False, None)  # full: not due
    done = [outcome({"task_id": locked[0]}, gated=True)]
    assert started_ids(kit, "n1", finished=done, serving=serving) == limited[1:2]
    assert kit.set_queue("q", limit=None) == Serving()  # no limit: the rest go
    assert started_ids(kit, "n2", serving=Serving()) == limited[2:]


def test_a_full_queue_s_task_holds_back_no_other_task_of_its_lock(kit: Kit) -> None:
    kit.register("n1")
    kit.add_tasks(1, NOW - timedelta(seconds=3), queue_name="q")
    serving = kit.set_queue("q", limit=1)
    assert len(started_ids(kit, "n1", serving=serving)) == 1  # q is full
    first = kit.add_tasks(1, NOW - timedelta(seconds=2), queue_name="q", lock="l")
    second = kit.add_tasks(1, NOW - timedelta(seconds=1), lock="l")
    assert started_ids(kit, "n1", serving=serving) == second
    assert kit.task(first[0]).status == TaskStatus.PENDING


def test_the_end_of_a_gated_task_is_told_to_the_other_nodes(kit: Kit) -> None:
    if kit.memory is None:
        pytest.skip("PostgreSQL notifies: tests/cluster/test_postgres_store.py")
    heard: list[str] = []
    kit.store.listen(heard.append, lambda: None, retry=1, retry_max=1, name="t")
    kit.register("n1")
    gated, plain = kit.add_tasks(1, lock="l"), kit.add_tasks(1)
    kit.store.start_tasks("n1", NOW, 5, LEASE)
    heard.clear()
    kit.store.record("n1", [outcome({"task_id": plain[0]})])
    assert heard == []
    kit.store.record("n1", [outcome({"task_id": gated[0]}, gated=True)])
    assert heard == ["task"]


# -- limits per key, rate limits (flow control) -----------------------------------------
def test_max_running_per_key_bounds_each_key_apart_on_all_nodes(kit: Kit) -> None:
    kit.register("n1", "n2")
    a = kit.add_tasks(3, NOW - timedelta(seconds=2), max_running=2, per_key="a")
    b = kit.add_tasks(3, NOW - timedelta(seconds=1), max_running=2, per_key="b")
    started = kit.store.start_tasks("n1", NOW, 3, LEASE)
    assert [(t.id, t.gated) for t in started] == [(a[0], True), (a[1], True), (b[0], True)]
    assert started_ids(kit, "n2") == b[1:2]  # two of each key run: the others wait
    assert started_ids(kit, "n1") == []
    assert kit.store.task_outlook(NOW) == (False, None)
    done = [outcome({"task_id": a[0]}, gated=True)]
    assert started_ids(kit, "n1", finished=done) == a[2:]


def test_a_key_s_tasks_start_in_due_order_behind_one_held_by_its_lock(kit: Kit) -> None:
    kit.register("n1")
    holder = kit.add_tasks(1, NOW - timedelta(seconds=3), lock="l")
    assert started_ids(kit, "n1") == holder
    first = kit.add_tasks(1, NOW - timedelta(seconds=2), lock="l", max_running=5, per_key="a")
    kit.add_tasks(1, NOW - timedelta(seconds=1), max_running=5, per_key="a")
    other = kit.add_tasks(1, NOW, max_running=5, per_key="b")
    assert started_ids(kit, "n1") == other
    done = [outcome({"task_id": holder[0]}, gated=True)]
    assert len(started_ids(kit, "n1", finished=done)) == 2
    assert kit.task(first[0]).status == TaskStatus.RUNNING


def rated(
    kit: Kit, n: int, run_at: datetime = NOW, per: str | None = None, **fields: Any
) -> list[int]:
    """``n`` tasks of a flow limited to 2 starts in any 10 seconds."""
    return kit.add_tasks(n, run_at, rate_limit=2, rate_period=10, per_key=per, **fields)


def test_a_rate_limit_bounds_the_starts_in_any_window_and_says_when_it_has_room(
    kit: Kit,
) -> None:
    kit.register("n1", "n2")
    ids = rated(kit, 6, NOW - timedelta(seconds=1))
    plain = kit.add_tasks(1)
    started = kit.store.start_tasks("n1", NOW, 10, LEASE)
    assert sorted(t.id for t in started) == sorted([*ids[:2], *plain])
    assert started.wake_at == NOW + timedelta(seconds=10)  # the window has room then
    assert not any(t.gated for t in started)  # a start holds no place: its end frees none
    kit.store.record("n1", [outcome({"task_id": i}, gated=True) for i in ids[:2]])
    assert kit.store.task_outlook(NOW) == (False, NOW + timedelta(seconds=10))
    assert started_ids(kit, "n2", at=NOW + timedelta(seconds=9.999)) == []  # ended: still counted
    assert started_ids(kit, "n2", at=NOW + timedelta(seconds=10)) == ids[2:4]


def test_a_rate_limit_s_window_slides(kit: Kit) -> None:
    kit.register("n1")
    s = timedelta(seconds=1)
    ids = rated(kit, 6, NOW - s)
    assert started_ids(kit, "n1", 1) == ids[:1]  # at 0
    assert started_ids(kit, "n1", 1, at=NOW + 5 * s) == ids[1:2]  # at 5: two in the window
    later = kit.store.start_tasks("n1", NOW + 6 * s, 5, LEASE)
    assert (list(later), later.wake_at) == ([], NOW + 10 * s)
    assert started_ids(kit, "n1", at=NOW + 10 * s) == ids[2:3]  # the start at 0 left it
    assert kit.store.task_outlook(NOW + 11 * s) == (False, NOW + 15 * s)
    assert started_ids(kit, "n1", at=NOW + 15 * s) == ids[3:4]


def test_a_claim_behind_a_later_start_of_its_flow_waits_for_its_clock_to_reach_it(
    kit: Kit,
) -> None:
    kit.register("n1", "n2")
    s = timedelta(seconds=1)
    ids = rated(kit, 3, NOW - s)
    assert started_ids(kit, "n1", 1, at=NOW + 5 * s) == ids[:1]
    behind = kit.store.start_tasks("n2", NOW + 4 * s, 5, LEASE)  # its clock reads earlier
    assert (list(behind), behind.wake_at) == ([], NOW + 5 * s)
    assert started_ids(kit, "n2", 1, at=NOW + 5 * s) == ids[1:2]


def test_a_rate_limit_per_key_counts_each_key_apart(kit: Kit) -> None:
    kit.register("n1")
    a = rated(kit, 3, NOW - timedelta(seconds=2), per="a")
    b = rated(kit, 3, NOW - timedelta(seconds=1), per="b")
    function_wide = rated(kit, 3)
    assert sorted(started_ids(kit, "n1")) == sorted([*a[:2], *b[:2], *function_wide[:2]])
    assert started_ids(kit, "n1") == []


def test_a_start_counts_against_its_rate_limit_when_its_node_died(kit: Kit) -> None:
    later = NOW + timedelta(seconds=5)
    kit.register("dead")
    kit.register("alive", at=later)
    ids = rated(kit, 3, NOW - timedelta(seconds=1), max_attempts=2)
    assert len(started_ids(kit, "dead", at=NOW)) == 2
    kit.store.heartbeat("alive", later, later + timedelta(seconds=30))
    kit.store.reap("alive", later, later - timedelta(seconds=1), RetryPolicy(0, 0))
    assert kit.task(ids[0]).status == TaskStatus.PENDING  # handed back, to be retried
    assert started_ids(kit, "alive", at=later) == []
    assert started_ids(kit, "alive", at=NOW + timedelta(seconds=10)) == [ids[2], ids[0]]


def test_a_claim_finds_the_tasks_behind_a_long_line_waiting_on_a_rate_limit(kit: Kit) -> None:
    kit.register("n1")
    waiting = rated(kit, 150, NOW - timedelta(seconds=2), per="busy")
    later = kit.add_tasks(2, NOW - timedelta(seconds=1), max_running=1, per_key="quiet")
    started = kit.store.start_tasks("n1", NOW, 10, LEASE)
    assert [t.id for t in started] == [*waiting[:2], later[0]]
    assert started.wake_at == NOW + timedelta(seconds=10)
    assert started_ids(kit, "n1") == []
