"""A guarded step's value (``ControlThread.attempt``): what a claim or a retry returns,
or None when the step failed and was handled (on the fake clock: no thread waits)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from django_htask.engine import FakeClock
from django_htask.exceptions import NodeFenced, StoreUnavailable
from django_htask.node.control import ControlThread, DatabaseBackoff

from .conftest import START


@pytest.fixture
def fenced() -> list[NodeFenced]:
    return []


@pytest.fixture
def control(fenced: list[NodeFenced]) -> Iterator[ControlThread]:
    backoff = DatabaseBackoff(1.0, 8.0, lambda: None)
    thread = ControlThread("n1", FakeClock(START), backoff, fenced.append, lambda: None)
    yield thread
    thread.close(wait=False)


def test_a_step_that_succeeds_gives_its_value(control: ControlThread) -> None:
    assert control.attempt(lambda: [7, 8], "claim") == [7, 8]
    assert control.attempt(list, "claim") == []  # an empty value is still a value
    assert control.guarded(lambda: None, "look") is True


def test_a_step_whose_database_is_away_gives_none_and_asks_for_its_retry(
    control: ControlThread,
) -> None:
    asked: list[float] = []

    class Retry:
        def request(self, delay: float = 0.0) -> None:
            asked.append(delay)

    def away() -> int:
        raise StoreUnavailable("gone")

    assert control.attempt(away, "claim", retry=Retry()) is None  # type: ignore[arg-type]
    assert asked == [control.backoff.delay] and control.backoff.delay > 0
    assert control.attempt(lambda: 3, "claim") == 3
    assert control.backoff.delay == 0  # a success starts the back-off over


def test_a_fenced_step_gives_none_and_tells_the_node(
    control: ControlThread, fenced: list[NodeFenced]
) -> None:
    error = NodeFenced("n1", None)

    def refused() -> int:
        raise error

    assert control.attempt(refused, "claim") is None
    assert fenced == [error]


def test_an_unexpected_error_gives_none_and_is_logged(
    control: ControlThread, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> int:
        raise RuntimeError("bad row")

    assert control.attempt(broken, "claim") is None
    assert control.guarded(broken, "look") is False
    assert [r.action for r in caplog.records] == ["node_error", "node_error"]  # type: ignore[attr-defined]


def test_an_outage_is_a_warning_once_per_delay_announced(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Hundreds of steps fail each second while the database is away (every schedule
    due, every claim): a warning each time the announced retry is due, DEBUG between."""
    clock = FakeClock(START)
    backoff = DatabaseBackoff(1.0, 8.0, lambda: None, clock.monotonic)
    gone = StoreUnavailable("gone")

    def levels(failures: int) -> list[str]:
        caplog.clear()
        for _ in range(failures):
            backoff.failed(gone)
        return [r.levelname for r in caplog.records if r.action == "db_unavailable"]  # type: ignore[attr-defined]

    with caplog.at_level(logging.DEBUG, logger="django_htask"):
        assert levels(3) == ["WARNING", "DEBUG", "DEBUG"]  # announced: 1 s
        clock.advance(0.5, wait=False)
        assert levels(1) == ["DEBUG"]
        clock.advance(0.5, wait=False)  # the retry announced is due
        assert levels(2) == ["WARNING", "DEBUG"]  # announced: 8 s now (the fifth failure)
        clock.advance(7.0, wait=False)
        assert levels(1) == ["DEBUG"]
        clock.advance(1.0, wait=False)
        assert levels(1) == ["WARNING"]
        backoff.succeeded()  # back: the next outage is told at once
        assert levels(1) == ["WARNING"]
