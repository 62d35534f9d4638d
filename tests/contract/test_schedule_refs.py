"""What ``load_schedules`` and ``changed_schedules`` give: the exact due times, and, on
the database stores, equal values shared among the rows (a node holds them for every
schedule)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.contract import test_store
from tests.contract.test_store import Kit

kit = test_store.kit  # the contract suite's fixture: each store of this pass

ZERO = timedelta(0)
DUE = [
    datetime(2030, 1, 1, tzinfo=UTC),
    datetime(2030, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
    datetime(2030, 6, 30, 23, 59, 59, 999_999, tzinfo=UTC),
    datetime(1969, 12, 31, 23, 59, 59, 500_000, tzinfo=UTC),  # before the epoch
    datetime(2255, 3, 4, 5, 6, 7, 123_457, tzinfo=UTC),  # beyond a double's microseconds
]


def set_due(kit: Kit, schedule_id: int, due: datetime | None) -> None:
    """Write the due time behind the model's back (``save()`` computes its own)."""
    if kit.memory is not None:
        kit.memory.schedules[schedule_id].next_run_at = due
        return
    from django_htask.models import Schedule

    Schedule.objects.filter(pk=schedule_id).update(next_run_at=due)


def test_due_times_are_read_to_the_microsecond(kit: Kit) -> None:
    ids = [kit.add_schedule(f"s{n}") for n in range(len(DUE))]
    for i, due in zip(ids, DUE, strict=True):
        set_due(kit, i, due)
    stored = {i: kit.schedule(i).next_run_at for i in ids}
    assert sorted(stored.values()) == sorted(DUE)
    refs, _top = kit.store.load_schedules()
    assert {r.id: r.next_run_at for r in refs} == stored
    assert all(r.next_run_at is not None and r.next_run_at.utcoffset() == ZERO for r in refs)
    changed, _top = kit.store.changed_schedules(0)
    assert {r.id: r.next_run_at for r in changed} == stored


def test_changed_schedules_read_disabled_and_unscheduled_rows(kit: Kit) -> None:
    off = kit.add_schedule("off", enabled=False)
    done = kit.add_schedule("done")
    set_due(kit, done, None)
    refs, _top = kit.store.load_schedules()
    assert {r.id for r in refs} == set()
    changed = {r.id: r for r in kit.store.changed_schedules(0)[0]}
    assert changed[off].enabled is False
    assert changed[done].next_run_at is None and changed[done].enabled is True


@pytest.mark.django_db(transaction=True)
def test_rows_share_equal_due_times_and_queue_names() -> None:
    from django_htask.models import Schedule
    from django_htask.store import get_store

    due = datetime(2030, 1, 1, 12, tzinfo=UTC)
    for n in range(6):
        row = Schedule(
            name=f"s{n}",
            function="tests.integration.testapp.tasks:add",
            schedule="@every 1h",
            queue_name="reports" if n % 2 else "default",
        )
        row.set_call((1,))
        row.save()
    Schedule.objects.update(next_run_at=due)
    for refs in (get_store().load_schedules()[0], get_store().changed_schedules(0)[0]):
        assert len(refs) == 6
        assert len({id(r.next_run_at) for r in refs}) == 1
        assert len({id(r.queue) for r in refs}) == 2
