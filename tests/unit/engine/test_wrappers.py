"""Job wrappers, alone and inside the Cron runner."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta

import pytest

from django_htask.engine import (
    Cron,
    FakeClock,
    JobSkipped,
    RunEvent,
    chain,
    current_run,
    current_token,
    delay_if_still_running,
    recover,
    retry,
    skip_if_still_running,
    timeout,
)

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def wait_for(predicate: object, seconds: float = 5.0) -> bool:
    pause = threading.Event()
    for _ in range(int(seconds * 100)):
        if predicate():  # type: ignore[operator]
            return True
        pause.wait(0.01)
    return False


def waiting_until(clock: FakeClock, when: datetime) -> bool:
    """True once a thread waits on ``clock`` for ``when`` (a retry's backoff, say)."""
    return when in clock.waiting()


def test_chain_order_is_outermost_first() -> None:
    order: list[str] = []

    def tag(label: str):  # type: ignore[no-untyped-def]
        def wrapper(job):  # type: ignore[no-untyped-def]
            def wrapped() -> object:
                order.append(label)
                return job()

            return wrapped

        return wrapper

    a, b = tag("a"), tag("b")

    def job() -> None:
        order.append("job")

    chain(a, b)(job)()
    assert order == ["a", "b", "job"]
    order.clear()
    a(b(job))()
    assert order == ["a", "b", "job"]
    with pytest.raises(TypeError, match="callable"):
        chain(a, 5)  # type: ignore[arg-type]


def test_recover_logs_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    wrapper = recover()

    def bad() -> None:
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="django_htask.engine.wrappers"):
        wrapper(bad)()
        wrapper(bad)()
    assert wrapper.failures == 2
    assert [r.action for r in caplog.records] == ["job_failed", "job_failed"]  # type: ignore[attr-defined]
    with pytest.raises(JobSkipped):
        wrapper(lambda: (_ for _ in ()).throw(JobSkipped("no")))()


def test_skip_if_still_running_alone() -> None:
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def slow() -> None:
        calls.append(1)
        started.set()
        release.wait(5)

    job = skip_if_still_running()(slow)
    thread = threading.Thread(target=job)
    thread.start()
    assert started.wait(5)
    with pytest.raises(JobSkipped, match="still running"):
        job()
    release.set()
    thread.join(5)
    job()
    assert calls == [1, 1]


def test_delay_if_still_running_serialises() -> None:
    started, release = threading.Event(), threading.Event()
    order: list[str] = []

    def first() -> None:
        order.append("first start")
        started.set()
        release.wait(5)
        order.append("first end")

    job_state = {"n": 0}

    def job() -> None:
        job_state["n"] += 1
        if job_state["n"] == 1:
            first()
        else:
            order.append("second")

    wrapped = delay_if_still_running()(job)
    one = threading.Thread(target=wrapped)
    one.start()
    assert started.wait(5)
    two = threading.Thread(target=wrapped)
    two.start()
    two.join(0.05)
    assert order == ["first start"]  # the second waits
    release.set()
    one.join(5)
    two.join(5)
    assert order == ["first start", "first end", "second"]


def test_timeout_alone_cancels_the_token_cooperatively() -> None:
    seen: list[bool] = []

    def polite() -> None:
        token = current_token()
        assert token is not None
        seen.append(token.cancelled)
        stop = threading.Event()
        token.on_cancel(lambda _t: stop.set())
        assert stop.wait(5)
        token.raise_if_cancelled()

    with pytest.raises(TimeoutError, match=r"ran past 0\.05s"):
        timeout(0.05)(polite)()
    assert seen == [False]
    assert timeout(5)(lambda: 42)() == 42
    with pytest.raises(ValueError, match="timeout must be"):
        timeout(0)


def test_retry_alone_without_backoff() -> None:
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("down")
        return "ok"

    assert retry(3, backoff=0)(flaky)() == "ok"
    assert len(attempts) == 3
    attempts.clear()

    def always() -> None:
        attempts.append(1)
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        retry(2, backoff=0)(always)()
    assert len(attempts) == 3
    with pytest.raises(ValueError, match="times must be"):
        retry(-1)
    with pytest.raises(ValueError, match="backoff must be"):
        retry(1, backoff=float("inf"))


# -- inside the runner (fake clock) -------------------------------------------------------
def test_retry_backs_off_on_the_runner_clock() -> None:
    clock = FakeClock(T0)
    cron = Cron(clock=clock, wrappers=(recover(), retry(2, backoff=10)))
    attempts: list[datetime] = []
    after: list[RunEvent] = []
    cron.on("after_run", after.append)

    def flaky() -> None:
        attempts.append(clock.now())
        run = current_run()
        assert run is not None and run.name == "flaky"
        raise ConnectionError("down")

    cron.add("@once 2030-01-01T00:00:01Z", flaky, name="flaky")
    cron.start()
    # Advance only once the retry waits for its backoff: advanced earlier, the clock
    # would already be past the moment the backoff starts counting from.
    clock.advance(1, wait=False)
    assert wait_for(lambda: waiting_until(clock, T0 + timedelta(seconds=11)))
    assert len(attempts) == 1
    clock.advance(10, wait=False)
    assert wait_for(lambda: waiting_until(clock, T0 + timedelta(seconds=31)))
    assert len(attempts) == 2
    clock.advance(20, wait=False)
    assert wait_for(lambda: len(after) == 1)
    assert [(a - T0).total_seconds() for a in attempts] == [1, 11, 31]
    assert isinstance(after[0].error, ConnectionError)
    assert after[0].duration == 30.0
    assert cron.stop().wait(5)


def test_timeout_in_the_runner_is_driven_by_the_clock() -> None:
    clock = FakeClock(T0)
    cron = Cron(clock=clock, wrappers=(recover(), timeout(5)))
    failed: list[RunEvent] = []
    cron.on("failed", failed.append)
    started = threading.Event()

    def long_job() -> None:
        token = current_token()
        assert token is not None
        stop = threading.Event()
        token.on_cancel(lambda _t: stop.set())
        started.set()
        assert stop.wait(5)

    cron.add("@once 2030-01-01T00:00:01Z", long_job, name="long")
    cron.start()
    clock.advance(1, wait=False)
    assert started.wait(5)
    clock.advance(5, wait=False)
    assert wait_for(lambda: len(failed) == 1)
    assert isinstance(failed[0].error, TimeoutError)
    assert cron.stop().wait(5)


def test_delay_in_the_runner_runs_every_occurrence_in_turn() -> None:
    clock = FakeClock(T0)
    cron = Cron(clock=clock, wrappers=(recover(), delay_if_still_running()))
    release = threading.Event()
    order: list[str] = []

    def job() -> None:
        order.append("start")
        if len(order) == 1:
            release.wait(5)
        order.append("end")

    cron.add("* * * * * *", job, max_runs=2)
    cron.start()
    clock.advance(1, wait=False)
    assert wait_for(lambda: order == ["start"])
    clock.advance(1, wait=False)
    release.set()
    assert wait_for(lambda: len(order) == 4)
    assert order == ["start", "end", "start", "end"]
    assert cron.stop().wait(5)


def test_retry_caps_its_backoff_at_max_delay() -> None:
    clock = FakeClock(T0)
    cron = Cron(clock=clock, wrappers=(recover(), retry(3, backoff=10, max_delay=15)))
    attempts: list[datetime] = []
    after: list[RunEvent] = []
    cron.on("after_run", after.append)

    def failing() -> None:
        attempts.append(clock.now())
        raise ConnectionError("down")

    cron.add("@once 2030-01-01T00:00:01Z", failing, name="failing")
    cron.start()
    clock.advance(1, wait=False)
    for seconds, until in ((10, 11), (15, 26), (15, 41)):
        assert wait_for(lambda until=until: waiting_until(clock, T0 + timedelta(seconds=until)))
        clock.advance(seconds, wait=False)
    assert wait_for(lambda: len(after) == 1)
    assert [(a - T0).total_seconds() for a in attempts] == [1, 11, 26, 41]
    assert cron.stop().wait(5)
