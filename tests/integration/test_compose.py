"""Tasks composed, from the caller to a node's run: graphs, chains and groups queued in
one transaction (a cycle, an unknown token or a bad call refused with nothing
stored), results passed by name as the receiving parameter's annotation declares, and
batches calling each callback once, with siblings added by a member while it runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import date
from typing import Any

import pytest

from django_htask import (
    BatchState,
    Graph,
    TaskNotFound,
    batch,
    call,
    chain,
    get_batch,
    group,
    schedule,
    schedule_many,
)
from django_htask.engine import ArgumentError, FakeClock
from django_htask.exceptions import BatchFinished, BatchNotFound, DependencyCycle
from django_htask.models import Batch, Dependency, Task, TaskStatus
from tests.integration.testapp import tasks
from tests.integration.testapp.tasks import calls

pytestmark = pytest.mark.django_db(transaction=True)

MakeNode = Callable[..., Any]


@pytest.fixture(autouse=True)
def _forget_calls() -> None:
    calls.clear()


def run_until(clock: FakeClock, done: Callable[[], bool], timeout: float = 10.0) -> None:
    """Let the node work (its timers on the fake clock) until ``done()``."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "not done in time"
        clock.advance(0)
        time.sleep(0.01)


def statuses(rows: list[Task]) -> list[str]:
    return [Task.objects.get(pk=t.pk).status for t in rows]


def test_a_chain_passes_a_result_by_name_as_its_annotation_declares(
    make_node: MakeNode, fake_clock: FakeClock
) -> None:
    make_node()
    tally = call(tasks.tally, ["a", "b"])
    first, second = chain(tally, call(tasks.summary).receiving("t")).schedule()
    assert (first.status, second.status) == (TaskStatus.PENDING, TaskStatus.WAITING)
    run_until(fake_clock, lambda: bool(calls["summary"]))
    assert calls["summary"] == [tasks.Tally(2, date(2030, 1, 1), ("a", "b"))]
    assert statuses([first, second]) == ["succeeded", "succeeded"]


def test_a_group_then_a_call_receiving_is_a_chord(
    make_node: MakeNode, fake_clock: FakeClock
) -> None:
    make_node()
    rows = chain(
        group(call(tasks.add, 1, 1), call(tasks.add, 2, 2), call(tasks.add, 3, 3)),
        call(tasks.total).receiving("parts"),
    ).schedule()
    assert Dependency.objects.filter(task=rows[-1]).count() == 3
    run_until(fake_clock, lambda: bool(calls["total"]))
    assert calls["total"] == [[2, 4, 6]]  # in the group's order


def test_a_failure_in_a_chain_cancels_what_comes_after_with_the_reason(
    make_node: MakeNode, fake_clock: FakeClock
) -> None:
    make_node()
    failing, later, last = chain(
        call(tasks.boom, "bad"), call(tasks.add, 1), call(tasks.add, 2)
    ).schedule()
    run_until(fake_clock, lambda: Task.objects.get(pk=last.pk).status == TaskStatus.CANCELLED)
    reason = Task.objects.get(pk=later.pk).last_error
    assert reason == (
        f"cancelled: it was to run after task {failing.token}, which failed: RuntimeError: bad"
    )
    assert calls["add"] == []


def test_a_cycle_is_refused_and_nothing_is_stored() -> None:
    g = Graph()
    a = g.add(tasks.add, 1)
    b = g.add(tasks.add, 2, after=[a])
    c = g.add(tasks.add, 3, after=[b])
    a.after(c)
    with pytest.raises(DependencyCycle) as caught:
        g.schedule()
    assert str(caught.value).endswith(
        "cycle: <Step 0 tests.integration.testapp.tasks:add> waits for <Step 2 "
        "tests.integration.testapp.tasks:add> waits for <Step 1 "
        "tests.integration.testapp.tasks:add> waits for <Step 0 "
        "tests.integration.testapp.tasks:add>"
    )
    assert not Task.objects.exists()


def test_a_token_no_task_has_is_refused_and_nothing_is_stored() -> None:
    with pytest.raises(TaskNotFound, match="nope"):
        schedule(tasks.add, 1, after=["nope"])
    with pytest.raises(TaskNotFound):
        schedule_many([(tasks.add, (1,), {}), (tasks.add, (2,), {})], after=["nope"])
    assert not Task.objects.exists() and not Dependency.objects.exists()


def test_a_graph_is_stored_all_or_none() -> None:
    g = Graph()
    a = g.add(tasks.add, 1, queue_name="other")
    g.add(tasks.add, 2, after={"b": a})
    g.add(tasks.add, "not an int", after=[a])
    with pytest.raises(ArgumentError, match=r"Step 2 .*add"):
        g.schedule()
    assert not Task.objects.exists()
    del g.steps[2]
    first, second = g.schedule()
    assert (first.queue_name, first.followed, second.status) == ("other", True, TaskStatus.WAITING)
    assert list(Dependency.objects.values_list("task", "after", "param")) == [
        (second.pk, first.pk, "b")
    ]


def test_a_result_goes_only_to_a_parameter_the_call_leaves_free() -> None:
    first = schedule(tasks.add, 1)
    with pytest.raises(ArgumentError, match="no parameter 'nope'"):
        schedule(tasks.add, 1, after={"nope": first})
    with pytest.raises(ArgumentError, match="parameter 'b' is given"):
        schedule(tasks.add, 1, 2, after={"b": first})
    with pytest.raises(ValueError, match="key"):
        schedule(tasks.add, 1, after=[first], key="k")
    assert schedule(tasks.add, after={"a": first}).status == TaskStatus.WAITING


def test_a_task_waiting_for_others_keeps_its_rate_limit_and_per_key() -> None:
    first = schedule(tasks.add, 1)
    waits = schedule(tasks.rated, 1, account="b", after=[first], max_running=3)
    stored = (waits.status, waits.per_key, waits.max_running, waits.rate_limit)
    assert stored == (TaskStatus.WAITING, "b", 3, 2)
    graph = Graph()
    graph.add(tasks.rated, 2, account="c", after=[first], rate_limit="5/s")
    [task] = graph.schedule()
    assert (task.per_key, task.rate_limit, task.rate_period) == ("c", 5, 1)
    with pytest.raises(ArgumentError, match="'account' cannot receive a result"):
        schedule(tasks.rated, 1, after={"account": first})


def test_a_batch_calls_back_once_and_counts_siblings_added_while_it_runs(
    make_node: MakeNode, fake_clock: FakeClock
) -> None:
    make_node()
    with batch(
        name="spawns",
        on_success=(tasks.batch_done, ("ok",), {}),
        on_failure=(tasks.batch_done, ("failed",), {}),
        on_finish=(tasks.batch_done, ("end",), {}),
    ) as b:
        schedule(tasks.spawn, 2)
        schedule(tasks.add, 1)
    run_until(fake_clock, lambda: bool(calls["batch_done:end"]))
    assert sorted(calls["spawn"]) == [0, 1, 2]  # each sibling ran, in the batch
    [state] = calls["batch_done:end"]
    assert isinstance(state, BatchState)
    assert (state.id, state.name, state.total, state.succeeded) == (b.id, "spawns", 4, 4)
    assert calls["batch_done:ok"] == [state]
    assert calls["batch_done:failed"] == []
    assert get_batch(b.id).finished and get_batch(b.id).remaining == 0
    row = Batch.objects.get(pk=b.id)
    assert Task.objects.get(pk=row.on_failure_id).status == TaskStatus.CANCELLED
    with pytest.raises(BatchFinished):
        b.schedule(tasks.add, 1)


def test_a_batch_block_is_one_transaction_and_an_empty_batch_is_complete_at_once() -> None:
    made: list[int] = []

    def change_my_mind() -> None:
        with batch(on_finish=tasks.batch_done) as b:
            made.append(b.id)
            schedule(tasks.add, 1)
            raise RuntimeError("changed my mind")

    with pytest.raises(RuntimeError):
        change_my_mind()
    assert not Task.objects.exists()
    with pytest.raises(BatchNotFound):
        get_batch(made[0])
    with batch(on_finish=tasks.batch_done) as empty:
        pass
    assert get_batch(empty.id).finished
    assert Task.objects.get().status == TaskStatus.PENDING  # its callback, released


def test_a_bad_callback_is_refused_before_anything_is_stored() -> None:
    with pytest.raises(ArgumentError, match="on_success"), batch(on_success=tasks.add):
        pass
    assert not Batch.objects.exists() and not Task.objects.exists()
