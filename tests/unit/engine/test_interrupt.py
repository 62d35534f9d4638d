"""RunGuard (a call's stop switch), WorkerPool.replace and CancelToken.wait: the engine
side of timeouts and aborts. Threads here wait on events, never on time."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable

import pytest

from django_htask.engine import CancelToken, ForcedStop, RunGuard, WorkerPool


def run_guarded(
    guard: RunGuard,
    fn: Callable[[], object],
    out: list[str],
    then: Callable[[], object] = lambda: None,
) -> threading.Thread:
    """A thread making ``fn()`` under ``guard``, as a node's worker does, then ``then()``
    (the code after the call, where no interrupt may land)."""

    def target() -> None:
        try:
            if not guard.enter():
                out.append("refused")
                return
            try:
                fn()
            finally:
                guard.leave()
            out.append("returned")
        except BaseException as exc:
            out.append(type(exc).__name__)
        then()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def spin_until(inside: threading.Event, stop: threading.Event) -> None:
    inside.set()
    while not stop.is_set():
        sum(range(10))


def test_stop_cancels_the_token_and_interrupt_raises_in_the_call() -> None:
    guard, inside, never = RunGuard(), threading.Event(), threading.Event()
    out: list[str] = []
    thread = run_guarded(guard, lambda: spin_until(inside, never), out)
    assert inside.wait(5)
    assert guard.stop("too long", retryable=True)
    assert guard.token.cancelled and guard.token.reason == "too long"
    assert not guard.stop("again")  # the first reason stays
    assert (guard.reason, guard.retryable) == ("too long", True)
    assert guard.interrupt()
    thread.join(5)
    assert out == ["ForcedStop"]
    assert not guard.interrupt()  # once
    assert guard.settle()
    assert not guard.abandon()  # the thread settled first


def test_forced_stop_is_no_exception_a_task_catches_by_accident() -> None:
    assert issubclass(ForcedStop, BaseException)
    assert not issubclass(ForcedStop, Exception)


def test_a_call_stopped_before_it_began_is_not_made() -> None:
    guard = RunGuard()
    assert guard.stop("aborted")
    out: list[str] = []
    run_guarded(guard, lambda: out.append("called"), out).join(5)
    assert out == ["refused"]


def test_interrupt_is_not_aimed_outside_the_call() -> None:
    guard = RunGuard()
    assert not guard.interrupt()  # not entered
    out: list[str] = []
    run_guarded(guard, lambda: None, out).join(5)
    assert out == ["returned"]
    assert not guard.interrupt()  # left
    assert not guard.inside


def test_leave_takes_back_an_interrupt_not_raised_yet() -> None:
    """An interrupt aimed at a thread blocked in C is raised when it wakes: if the call
    returns first (leave), it must not escape into the code after the call."""
    guard, inside, release = RunGuard(), threading.Event(), threading.Event()
    out: list[str] = []
    after: list[str] = []

    def blocked() -> None:
        inside.set()
        release.wait(5)  # in C: the interrupt waits for it

    def code_after_the_call() -> None:
        for _ in range(1000):  # bytecodes: no exception may land here
            after.append("x")

    thread = run_guarded(guard, blocked, out, then=code_after_the_call)
    assert inside.wait(5)
    assert guard.interrupt()
    release.set()
    thread.join(5)
    assert out in (["ForcedStop"], ["returned"])
    assert len(after) == 1000


#: Run in a fresh interpreter: an interrupt taken back, then a profile function that
#: raises (as a test counting calls does). It loops for ever if the take-back left
#: CPython's pending-exception signal on.
_PROFILE_AFTER_TAKE_BACK = """
import sys
from django_htask.engine import ForcedStop, RunGuard

guard = RunGuard()
guard.enter()
try:
    guard.interrupt()  # aimed at this thread itself, raised at its next check
    while True:
        pass
except ForcedStop:
    pass
guard.leave()
calls = 0

def profile(frame, event, arg):
    global calls
    if event == "call":
        calls += 1
        if calls > 3:
            raise RuntimeError("over budget")

def one():
    return 1

sys.setprofile(profile)
try:
    [one() for _ in range(10)]
except RuntimeError:
    pass
finally:
    sys.setprofile(None)
print("done", calls)
"""


def test_an_interrupt_taken_back_leaves_no_pending_signal_behind() -> None:
    """After a forced stop, the thread (and every other) runs as before: a profile
    function that raises ends the profiled call, as it did before any interrupt."""
    done = subprocess.run(
        [sys.executable, "-c", _PROFILE_AFTER_TAKE_BACK],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "done 4"), done.stderr


def test_abandon_and_settle_exclude_each_other() -> None:
    guard = RunGuard()
    assert guard.abandon()
    assert not guard.settle()  # the outcome was recorded for it
    assert not guard.stop("late")  # nothing to stop any more


def test_replace_gives_a_stuck_worker_up_and_restores_capacity() -> None:
    pool = WorkerPool(1, name="replace")
    try:
        stuck, release, after = threading.Event(), threading.Event(), threading.Event()
        threads: list[threading.Thread] = []

        def hang() -> None:
            threads.append(threading.current_thread())
            stuck.set()
            release.wait(10)

        pool.submit(hang)
        pool.submit(after.set)  # behind it on the only worker
        assert stuck.wait(5)
        assert not after.is_set()
        assert pool.replace(threads[0])
        assert after.wait(5)  # the new worker took it
        assert pool.abandoned() == 1
        assert not pool.replace(threads[0])  # not a worker any more
        release.set()
        threads[0].join(5)
        assert pool.abandoned() == 0  # it ended after its call, not back in the pool
        assert pool.workers == 1 and pool.alive() == 1
    finally:
        release.set()
        assert pool.shutdown(wait=True, timeout=5)


class Hang:
    """A call that hangs until released, and the thread it hangs in."""

    def __init__(self) -> None:
        self.stuck, self.release = threading.Event(), threading.Event()
        self.threads: list[threading.Thread] = []

    def __call__(self) -> None:
        self.threads.append(threading.current_thread())
        self.stuck.set()
        self.release.wait(30)

    def started_in(self, pool: WorkerPool) -> threading.Thread:
        pool.submit(self)
        assert self.stuck.wait(5)
        return self.threads[0]


def test_shutdown_does_not_wait_for_a_given_up_thread() -> None:
    pool = WorkerPool(0, name="replace-per-task")
    hang = Hang()
    try:
        assert pool.replace(hang.started_in(pool))
        assert pool.shutdown(wait=True, timeout=5)
    finally:
        hang.release.set()


@pytest.mark.parametrize("workers", [1, 0])
def test_shutdown_stops_waiting_for_a_thread_given_up_while_it_waits(workers: int) -> None:
    pool = WorkerPool(workers, name="replace-while-waited")
    hang = Hang()
    try:
        thread = hang.started_in(pool)
        done: list[bool] = []
        waiting = threading.Thread(target=lambda: done.append(pool.shutdown(timeout=30)))
        waiting.start()
        waiting.join(0.2)
        assert waiting.is_alive()  # it waits for the call
        assert pool.replace(thread)
        waiting.join(5)
        assert done == [True]  # at once, not at its timeout
    finally:
        hang.release.set()


@pytest.mark.parametrize("cancel_first", [True, False])
def test_token_wait_returns_when_cancelled(cancel_first: bool) -> None:
    token = CancelToken()
    assert token.wait(0) is False
    if cancel_first:
        token.cancel("now")
        assert token.wait(60) is True
        return
    waiting = threading.Event()
    result: list[bool] = []

    def wait() -> None:
        waiting.set()
        result.append(token.wait(60))

    thread = threading.Thread(target=wait)
    thread.start()
    assert waiting.wait(5)
    token.cancel("now")
    thread.join(5)
    assert result == [True]
