"""The resizable worker pool on its own."""

from __future__ import annotations

import logging
import threading

import pytest

from django_htask.engine import SchedulerClosed, WorkerPool


def run_all(pool: WorkerPool, n: int) -> list[int]:
    seen: list[int] = []
    lock = threading.Lock()
    done = threading.Semaphore(0)

    def job(i: int) -> None:
        with lock:
            seen.append(i)
        done.release()

    for i in range(n):
        pool.submit(lambda i=i: job(i))
    for _ in range(n):
        assert done.acquire(timeout=5)
    return seen


@pytest.mark.parametrize("workers", [0, 1, 4])
def test_runs_everything(workers: int) -> None:
    pool = WorkerPool(workers, name="p")
    assert sorted(run_all(pool, 200)) == list(range(200))
    assert pool.shutdown(timeout=5)
    assert pool.alive() == 0


def test_resize_up_and_down() -> None:
    pool = WorkerPool(2, name="p")
    assert pool.alive() == 2
    pool.resize(5)
    assert pool.alive() == 5
    pool.resize(1)
    run_all(pool, 50)  # surplus workers leave after a task or a wake-up
    for _ in range(100):
        if pool.alive() == 1:
            break
        threading.Event().wait(0.01)
    assert pool.alive() == 1
    assert pool.workers == 1
    pool.shutdown(timeout=5)


def test_errors_are_logged_and_the_worker_lives(caplog: pytest.LogCaptureFixture) -> None:
    pool = WorkerPool(1, name="p")
    ok = threading.Event()

    def boom() -> None:
        raise ValueError("nope")

    with caplog.at_level(logging.ERROR, logger="django_htask.engine"):
        pool.submit(boom)
        pool.submit(ok.set)
        assert ok.wait(5)
    assert any(getattr(r, "action", None) == "worker_error" for r in caplog.records)
    pool.shutdown(timeout=5)


def test_shutdown_runs_queued_work_then_refuses() -> None:
    pool = WorkerPool(1, name="p")
    release = threading.Event()
    seen: list[int] = []
    pool.submit(lambda: release.wait(5))
    for i in range(10):
        pool.submit(lambda i=i: seen.append(i))
    release.set()
    assert pool.shutdown(timeout=5)
    assert seen == list(range(10))
    with pytest.raises(SchedulerClosed):
        pool.submit(print)
    with pytest.raises(SchedulerClosed):
        pool.resize(2)


def test_shutdown_timeout_reports_unfinished() -> None:
    pool = WorkerPool(1, name="p")
    release = threading.Event()
    started = threading.Event()
    pool.submit(lambda: (started.set(), release.wait(5)))
    assert started.wait(5)
    assert pool.shutdown(timeout=0.01) is False
    release.set()
    assert pool.shutdown(timeout=5) is True


def test_is_worker_thread() -> None:
    pool = WorkerPool(1, name="p")
    answer: list[bool] = []
    done = threading.Event()
    pool.submit(lambda: (answer.append(pool.is_worker_thread()), done.set()))
    assert done.wait(5)
    assert answer == [True]
    assert pool.is_worker_thread() is False
    pool.shutdown(timeout=5)


@pytest.mark.parametrize("workers", [0, 3])
def test_on_thread_exit_runs_on_each_ending_thread_before_shutdown_returns(
    workers: int,
) -> None:
    ran: list[str] = []
    lock = threading.Lock()

    def on_exit() -> None:
        threading.Event().wait(0.05)  # shutdown() must wait for it
        with lock:
            ran.append(threading.current_thread().name)

    pool = WorkerPool(workers, name="p", on_thread_exit=on_exit)
    run_all(pool, 5)
    assert pool.shutdown(timeout=5)
    assert pool.alive() == 0
    assert len(ran) == len(set(ran)) == (workers or 5)


def test_on_thread_exit_runs_when_the_pool_shrinks_and_errors_are_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[str] = []

    def on_exit() -> None:
        ran.append(threading.current_thread().name)
        raise RuntimeError("cannot close")

    pool = WorkerPool(3, name="p", on_thread_exit=on_exit)
    with caplog.at_level(logging.ERROR, logger="django_htask.engine"):
        pool.resize(1)
        for _ in range(500):
            if pool.alive() == 1:
                break
            threading.Event().wait(0.01)
        assert pool.alive() == 1
        assert len(ran) == 2
        assert sorted(run_all(pool, 3)) == [0, 1, 2]
        assert pool.shutdown(timeout=5)
    assert len(ran) == 3
    assert [getattr(r, "action", None) for r in caplog.records] == ["worker_exit_error"] * 3
