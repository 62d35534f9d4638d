"""Run retention: ``prune_runs`` (called hourly by the node and by ``htask prune``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from django_htask.engine import FakeClock
from django_htask.models import Run, RunStatus, prune_runs

pytestmark = pytest.mark.django_db


def make_run(name: str, days_ago: float, clock: FakeClock, status: str = "succeeded") -> Run:
    finished = clock.now() - timedelta(days=days_ago)
    return Run.objects.create(
        name=name,
        function="f",
        status=status,
        started_at=finished,
        finished_at=None if status == RunStatus.RUNNING else finished,
    )


def names() -> list[str]:
    return sorted(Run.objects.values_list("name", flat=True))


def test_prune_deletes_finished_runs_older_than_the_retention(fake_clock: FakeClock) -> None:
    make_run("old-ok", 31, fake_clock)
    make_run("old-failed", 40, fake_clock, status=RunStatus.FAILED)
    make_run("old-running", 40, fake_clock, status=RunStatus.RUNNING)
    make_run("recent", 29, fake_clock)
    assert prune_runs() == 2  # RUN_RETENTION_DAYS defaults to 30
    assert names() == ["old-running", "recent"]
    assert prune_runs(days=10) == 1
    assert names() == ["old-running"]


def test_retention_zero_keeps_runs_for_ever_unless_days_are_given(
    fake_clock: FakeClock, settings: Any
) -> None:
    settings.HTASK = {"RUN_RETENTION_DAYS": 0}
    make_run("ancient", 3650, fake_clock)
    assert prune_runs() == 0
    assert names() == ["ancient"]
    assert prune_runs(days=0) == 1


@pytest.mark.parametrize("days", [-1, 1.5, "7", True])
def test_prune_rejects_bad_days(days: Any) -> None:
    with pytest.raises(ValueError, match=repr(days).replace("(", r"\(")):
        prune_runs(days=days)
