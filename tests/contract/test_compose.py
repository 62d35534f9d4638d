"""The store contract of tasks composed (django_htask.store.follow): tasks waiting for
others released, cancelled or left waiting as the ends they wait for are written, and
batches counting their members' ends and releasing each callback once, on the
in-memory store and on the database of the pass."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from django_htask.engine import decode_call, encode_result
from django_htask.enums import RunStatus, TaskStatus
from django_htask.store import StartedTask

from .test_store import ADD, LEASE, NOW, RETRY, Kit, kit, outcome

__all__ = ["kit"]

CALLBACK = "tests.integration.testapp.tasks:batch_done"


def after(
    kit: Kit,
    deps: list[int],
    *,
    bind: dict[str, int] | None = None,
    after_failure: str = "cancel",
) -> int:
    """A task ``add(1)`` that runs after the tasks ``deps`` (and receives, under each
    name of ``bind``, that task's result), as ``schedule(after=...)`` queues it."""
    if kit.memory is not None:
        return kit.memory.add_task(ADD, 1, after=deps, bind=bind, after_failure=after_failure)
    from django_htask.api import schedule

    spec: list[Any] = [kit.task(d).token for d in deps]
    if bind:
        spec.append({name: kit.task(i).token for name, i in bind.items()})
    return schedule(ADD, 1, after=spec, after_failure=after_failure).pk


def make_batch(
    kit: Kit, members: int, deps: tuple[int, ...] = (), **callbacks: str
) -> tuple[int, list[int]]:
    """A batch of ``members`` tasks ``add(1)`` due now (after the tasks ``deps``), with
    ``callbacks`` (role -> label of a ``batch_done`` callback); its id and its members'
    ids."""
    if kit.memory is not None:
        roles = dict.fromkeys(callbacks, CALLBACK)
        batch_id = kit.memory.add_batch("b", **roles)
        memory = kit.memory
        ids = [memory.add_task(ADD, 1, batch=batch_id, after=deps) for _ in range(members)]
        return batch_id, ids
    from django_htask.api import schedule
    from django_htask.compose import batch

    roles = {role: (CALLBACK, (label,), {}) for role, label in callbacks.items()}
    tokens = [kit.task(d).token for d in deps]
    with batch(name="b", **roles) as b:  # type: ignore[arg-type]
        ids = [schedule(ADD, 1, after=tokens or None).pk for _ in range(members)]
    return b.id, ids


def batch_row(kit: Kit, batch_id: int) -> Any:
    if kit.memory is not None:
        return kit.memory.batches[batch_id]
    from django_htask.models import Batch

    return Batch.objects.get(pk=batch_id)


def start(kit: Kit, limit: int = 10, node: str = "n1") -> list[StartedTask]:
    return kit.store.start_tasks(node, NOW, limit, LEASE)


def end(kit: Kit, task: StartedTask, status: str = RunStatus.SUCCEEDED, **fields: Any) -> None:
    """Record ``task``'s end, as its node would (its claim's ``follow`` passed on)."""
    kit.store.record(
        "n1", [outcome({"task_id": task.id, "follow": task.follow}, status=status, **fields)]
    )


def status(kit: Kit, task_id: int) -> str:
    return str(kit.task(task_id).status)


def test_a_task_waits_unclaimed_until_what_it_runs_after_succeeded(kit: Kit) -> None:
    kit.register("n1")
    [a] = kit.add_tasks(1)
    c = after(kit, [a])
    assert (status(kit, c), kit.task(c).waiting_on) == (TaskStatus.WAITING, 1)
    [started] = start(kit)
    assert started.id == a and started.follow  # its end is followed up
    assert start(kit) == [] and kit.store.task_outlook(NOW) == (False, None)
    end(kit, started)
    assert status(kit, c) == TaskStatus.PENDING
    assert [t.id for t in start(kit)] == [c]


def test_a_fan_in_is_released_by_the_last_of_its_dependencies(kit: Kit) -> None:
    kit.register("n1")
    a, b = kit.add_tasks(2)
    c = after(kit, [a, b])
    first, second = start(kit)
    end(kit, first)
    assert (status(kit, c), kit.task(c).waiting_on) == (TaskStatus.WAITING, 1)
    end(kit, second)
    assert status(kit, c) == TaskStatus.PENDING


def test_a_failure_cancels_the_tasks_after_it_with_the_reason_through_the_graph(
    kit: Kit,
) -> None:
    kit.register("n1")
    [a] = kit.add_tasks(1)
    c = after(kit, [a])
    d = after(kit, [c])
    anyway = after(kit, [a], after_failure="run")
    [started] = start(kit)
    end(kit, started, RunStatus.FAILED, error="ValueError: no")
    token = kit.task(a).token
    assert status(kit, c) == TaskStatus.CANCELLED
    assert kit.task(c).last_error == (
        f"cancelled: it was to run after task {token}, which failed: ValueError: no"
    )
    assert kit.task(c).finished_at is not None
    assert status(kit, d) == TaskStatus.CANCELLED
    assert kit.task(d).last_error.endswith(f"{kit.task(c).token}, which was cancelled")
    assert status(kit, anyway) == TaskStatus.PENDING


def test_a_retry_neither_releases_nor_cancels_and_its_later_success_releases(kit: Kit) -> None:
    kit.register("n1")
    [a] = kit.add_tasks(1, max_attempts=2)
    c = after(kit, [a])
    [started] = start(kit)
    end(kit, started, RunStatus.FAILED, error="no", retry_at=NOW)
    assert (status(kit, a), status(kit, c)) == (TaskStatus.PENDING, TaskStatus.WAITING)
    [again] = start(kit)
    end(kit, again)
    assert status(kit, c) == TaskStatus.PENDING


def test_a_result_is_passed_by_name_to_the_task_released(kit: Kit) -> None:
    kit.register("n1")
    [a] = kit.add_tasks(1)
    c = after(kit, [], bind={"b": a})
    [started] = start(kit)
    end(kit, started, result=encode_result(41))
    assert status(kit, c) == TaskStatus.PENDING
    assert decode_call(bytes(kit.task(c).payload)) == (ADD, [1], {"b": 41})


def test_a_task_waited_for_from_while_it_ran_releases_it_though_its_claim_said_none(
    kit: Kit,
) -> None:
    """The claim read the task as followed by nothing; a task queued after it while
    it ran is released all the same (the guard of its end refuses the plain write)."""
    kit.register("n1")
    [a] = kit.add_tasks(1)
    [started] = start(kit)
    assert not started.follow
    c = after(kit, [a])
    end(kit, started)
    assert (status(kit, a), status(kit, c)) == (TaskStatus.SUCCEEDED, TaskStatus.PENDING)
    assert [r.status for r in kit.attempts(a)] == [TaskStatus.SUCCEEDED]


def test_a_task_queued_after_ended_ones_is_released_or_cancelled_at_once(kit: Kit) -> None:
    kit.register("n1")
    ok, bad = kit.add_tasks(2)
    first, second = start(kit)
    end(kit, first)
    end(kit, second, RunStatus.FAILED, error="no")
    assert status(kit, after(kit, [ok])) == TaskStatus.PENDING
    assert status(kit, after(kit, [ok, bad])) == TaskStatus.CANCELLED
    assert status(kit, after(kit, [bad], after_failure="run")) == TaskStatus.PENDING


def test_a_dependency_reaped_for_good_cancels_the_tasks_after_it(kit: Kit) -> None:
    kit.register("n1", "n2")
    [a] = kit.add_tasks(1)
    c = after(kit, [a])
    start(kit)
    later = NOW + timedelta(seconds=120)
    kit.register("n2", at=later)
    kit.store.reap("n2", later, later - timedelta(seconds=30), RETRY)
    assert (status(kit, a), status(kit, c)) == (TaskStatus.FAILED, TaskStatus.CANCELLED)
    assert "stopped answering" in kit.task(c).last_error


def test_a_batch_counts_its_members_and_calls_each_callback_once(kit: Kit) -> None:
    kit.register("n1")
    batch_id, members = make_batch(kit, 3, on_success="s", on_failure="f", on_finish="e")
    row = batch_row(kit, batch_id)
    callbacks = (row.on_success_id, row.on_failure_id, row.on_finish_id)
    assert [status(kit, i) for i in callbacks] == [TaskStatus.WAITING] * 3
    started = start(kit)
    assert sorted(t.id for t in started) == sorted(members)
    end(kit, started[0], RunStatus.FAILED, error="no")
    assert [status(kit, i) for i in callbacks] == ["waiting", "pending", "waiting"]
    end(kit, started[1], RunStatus.FAILED, error="no again")
    end(kit, started[2])
    row = batch_row(kit, batch_id)
    assert (row.total, row.succeeded, row.failed, row.cancelled) == (3, 1, 2, 0)
    assert row.finished_at is not None and row.failed_at is not None
    assert [status(kit, i) for i in callbacks] == ["cancelled", "pending", "pending"]
    assert "2 of its 3 members failed" in kit.task(row.on_success_id).last_error
    name, args, _kwargs = decode_call(bytes(kit.task(row.on_finish_id).payload))
    assert (name, args[1:]) == (CALLBACK, [] if kit.memory else ["e"])
    state = args[0]
    assert (state["id"], state["total"], state["succeeded"], state["failed"]) == (batch_id, 3, 1, 2)


def test_a_member_retried_then_succeeding_never_calls_on_failure(kit: Kit) -> None:
    kit.register("n1")
    batch_id, [member] = make_batch(kit, 1, on_success="s", on_failure="f")
    row = batch_row(kit, batch_id)
    kit_task_retry(kit, member)
    [started] = start(kit)
    end(kit, started, RunStatus.FAILED, error="no", retry_at=NOW)
    assert status(kit, row.on_failure_id) == TaskStatus.WAITING
    [again] = start(kit)
    end(kit, again)
    assert status(kit, row.on_success_id) == TaskStatus.PENDING
    assert status(kit, row.on_failure_id) == TaskStatus.CANCELLED


def kit_task_retry(kit: Kit, task_id: int) -> None:
    """Give the task a second attempt (as ``max_attempts=2`` would have)."""
    if kit.memory is not None:
        kit.memory.tasks[task_id].max_attempts = 2
        return
    from django_htask.models import Task

    Task.objects.filter(pk=task_id).update(max_attempts=2)


def test_a_member_cancelled_by_a_failure_it_waited_for_is_counted(kit: Kit) -> None:
    kit.register("n1")
    [outside] = kit.add_tasks(1, run_at=NOW + timedelta(hours=1))
    batch_id, [member] = make_batch(kit, 1, (outside,), on_finish="e")
    c = after(kit, [outside])
    assert kit.cancel(outside)
    assert status(kit, c) == TaskStatus.CANCELLED
    assert status(kit, member) == TaskStatus.CANCELLED
    row = batch_row(kit, batch_id)
    assert (row.cancelled, row.finished_at is not None) == (1, True)
    assert status(kit, row.on_finish_id) == TaskStatus.PENDING


@pytest.mark.parametrize("waiting", [False, True])
def test_cancelling_a_task_cancels_those_after_it(kit: Kit, waiting: bool) -> None:
    kit.register("n1")
    [first] = kit.add_tasks(1, run_at=NOW + timedelta(hours=1))
    a = after(kit, [first]) if waiting else first
    c = after(kit, [a])
    assert kit.cancel(a)
    assert (status(kit, a), status(kit, c)) == (TaskStatus.CANCELLED, TaskStatus.CANCELLED)
    assert "which was cancelled" in kit.task(c).last_error


RATED = "tests.integration.testapp.tasks:rated"


def rated_after(kit: Kit, deps: list[int], n: int) -> list[int]:
    """``n`` tasks ``rated(i, account="a")`` (at most 2 starts in any 10 seconds per
    account) that run after the tasks ``deps``."""
    if kit.memory is not None:
        memory = kit.memory
        return [
            memory.add_task(
                RATED, i, account="a", after=deps, per_key="a", rate_limit=2, rate_period=10
            )
            for i in range(n)
        ]
    from django_htask.api import schedule

    tokens = [kit.task(d).token for d in deps]
    return [schedule(RATED, i, account="a", after=tokens).pk for i in range(n)]


def test_tasks_released_start_under_their_rate_limit_per_key(kit: Kit) -> None:
    kit.register("n1")
    [a] = kit.add_tasks(1)
    waiting = rated_after(kit, [a], 3)
    rows = [kit.task(i) for i in waiting]
    assert {(t.status, t.per_key, t.rate_limit, t.rate_period) for t in rows} == {
        (TaskStatus.WAITING, "a", 2, 10)
    }
    [started] = start(kit)  # neither the plain claim nor the gated walk reads them
    assert started.id == a
    end(kit, started)
    assert [status(kit, i) for i in waiting] == [TaskStatus.PENDING] * 3
    released = kit.store.start_tasks("n1", NOW, 10, LEASE)
    assert [t.id for t in released] == waiting[:2]
    assert released.wake_at == NOW + timedelta(seconds=10)  # the window has room then
