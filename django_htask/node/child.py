"""A worker process of the process pool (``runscheduler --pool process``): run as
``python -m django_htask.node.child NODE_ID DATA_FD CONTROL_FD`` by
:class:`~django_htask.node.processes.ProcessPool`, never by hand. It names itself
``htask-worker`` (what ``top`` and ``ps -o comm`` show); ``ps`` shows that command line,
its node's id in it.

It sets Django up once, then makes the calls its node sends it, one at a time, each
with :func:`~django_htask.node.execution.execute` as a worker thread would, and sends
back each outcome. Two channels link it to its node (pickled messages over a socket
pair each):

- data, on the main thread: ``Hello`` then ``Run`` and ``Exit`` in; ``Ready`` or
  ``Broken`` then a ``Done`` per run out (the outcome, with a task's result already
  encoded here, so that its size is checked in this process and only bytes cross,
  and why the process exits after this run, if it does);
- control, on a thread of its own: ``Cancel`` cancels the run's token (the
  cooperative stop), ``Force`` raises :class:`~django_htask.engine.ForcedStop` in the
  call (a signal to the main thread, which also breaks a ``time.sleep`` or a blocking
  read). When that channel closes —
  the node exited, or was killed — the process ends at once, its call with it: a run
  must not go on after its node is gone, for another node retries it.

It ignores SIGINT and SIGTERM: Ctrl-C in a terminal, or a service manager's SIGTERM to
the whole group, is for the node, which decides when its runs end.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import resource
import signal
import sys
import threading
import traceback
from multiprocessing.connection import Connection
from types import FrameType
from typing import Any

from .messages import OWN_PYTHONPATH, Broken, Cancel, Done, Force, Hello, Ready, Run

__all__ = ["main", "run"]

#: The signal the control thread sends the main thread to force a call to stop.
FORCE_SIGNAL = signal.SIGUSR1
#: Exit status of a child whose node went away.
EXIT_ORPHANED = 70


class _State:
    """What the main thread is running, shared with the control thread and the signal
    handler (plain attributes: the handler takes no lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seq: int | None = None  # the run being made
        self.guard: Any = None  # its RunGuard
        self.forced: int | None = None  # the run a force was aimed at
        self.cancel: Cancel | None = None  # a cancel that came early


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _name_process()
    _put_back_pythonpath()
    data = Connection(int(argv[2]))
    control = Connection(int(argv[3]))
    hello = data.recv()
    if not isinstance(hello, Hello):
        return 2
    config = hello.config
    sys.path[:] = config["sys_path"]  # the node's, exactly
    try:
        _set_up(config)
    except BaseException:  # any failure is reported to the node
        data.send(Broken(traceback.format_exc()))
        return 1
    state = _State()
    threading.Thread(
        target=_control, args=(control, state), name="htask-child-control", daemon=True
    ).start()

    def force(signum: int, frame: FrameType | None) -> None:
        from django_htask.engine import ForcedStop  # noqa: PLC0415 - imported by now

        guard = state.guard
        forced = state.forced is not None and state.forced == state.seq
        if forced and guard is not None and guard.inside:
            raise ForcedStop("the run was forced to stop")

    signal.signal(FORCE_SIGNAL, force)
    data.send(Ready(os.getpid()))
    return _serve(data, state, config)


#: The name a worker process gives itself (at most 15 bytes: the kernel's limit).
PROCESS_NAME = b"htask-worker"
#: ``prctl``'s option that sets the calling thread's name.
_PR_SET_NAME = 15


def _name_process() -> None:
    """Call this process ``htask-worker`` where the kernel names it (Linux; elsewhere
    nothing): its main thread's name is what ``top`` and ``ps -o comm`` show."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_NAME, PROCESS_NAME, 0, 0, 0)


def _put_back_pythonpath() -> None:
    """The node's own PYTHONPATH, for what this process starts (the pool set it to the
    node's path to start this one: :func:`~django_htask.node.processes.child_environment`)."""
    own = os.environ.pop(OWN_PYTHONPATH, None)
    if own is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = own


def _set_up(config: dict[str, Any]) -> None:
    """Django, on the databases the node uses (the Django side:
    :mod:`django_htask.store.processes`)."""
    from django_htask.store.processes import set_up  # noqa: PLC0415

    set_up(config["databases"])


def _serve(data: Connection, state: _State, config: dict[str, Any]) -> int:
    from django_htask.clock import get_clock  # noqa: PLC0415
    from django_htask.engine import RunGuard  # noqa: PLC0415
    from django_htask.store.processes import refresh  # noqa: PLC0415

    from .execution import execute  # noqa: PLC0415

    max_tasks: int = config["max_tasks"]
    max_memory: int = config["max_memory"]  # MiB
    max_result: int = config["max_result"]  # bytes
    done = 0
    while True:
        try:
            message = data.recv()
        except EOFError:
            return 0
        if not isinstance(message, Run):
            return 0  # Exit
        seq, call = message
        guard = RunGuard()
        with state.lock:
            early, state.cancel = state.cancel, None
            state.guard, state.seq = guard, seq
        if early is not None and early.seq == seq:
            guard.stop(early.reason, retryable=early.retryable)
        outcome = execute(
            call, clock=get_clock(), refresh=refresh, guard=guard, max_result=max_result
        )
        with state.lock:
            state.seq = state.guard = None
        done += 1
        recycle = ""
        if max_tasks and done >= max_tasks:
            recycle = f"it made {done} calls (MAX_TASKS_PER_CHILD {max_tasks})"
        elif max_memory and (used := _peak_mib()) > max_memory:
            recycle = f"its memory reached {used} MiB (MAX_MEMORY_PER_CHILD {max_memory})"
        data.send(
            Done(
                seq,
                outcome.status,
                outcome.error,
                outcome.traceback,
                outcome.duration,
                outcome.result,
                outcome.extra,
                recycle,
            )
        )
        if recycle:
            return 0


def _peak_mib() -> int:
    """The process's peak resident memory, in MiB (``ru_maxrss`` is in KiB on Linux)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // (1024 * 1024) if sys.platform == "darwin" else peak // 1024


def _control(control: Connection, state: _State) -> None:
    main_thread = threading.main_thread().ident or 0
    while True:
        try:
            message = control.recv()
        except (EOFError, OSError):
            os._exit(EXIT_ORPHANED)  # the node is gone: so is its run
        with state.lock:
            if isinstance(message, Cancel):
                if state.seq == message.seq and state.guard is not None:
                    guard = state.guard
                else:
                    state.cancel = message  # its run not begun
                    continue
            elif isinstance(message, Force):
                if state.seq == message.seq and state.guard is not None and state.guard.inside:
                    state.forced = message.seq
                    signal.pthread_kill(main_thread, FORCE_SIGNAL)
                continue
            else:
                continue
        guard.stop(message.reason, retryable=message.retryable)


def run(argv: list[str]) -> None:
    """The process: :func:`main`, then an exit that does not tear the interpreter down
    (a quarter of a second with Django loaded, which the node would wait for when it
    replaces a process); exit handlers run, connections are closed."""
    code = main(argv)
    if "django_htask.store.processes" in sys.modules:  # Django was set up
        from django_htask.store.processes import close  # noqa: PLC0415

        close()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run(sys.argv)
