"""The process pool (``runscheduler --pool process``, the ``POOL`` setting): each of a
node's worker threads makes its calls in a worker process of its own rather than in
itself, so that CPU-heavy work runs on every core, a call that leaks memory or crashes
takes only its process down, and a call that must be stopped can always be.

A worker process (:mod:`django_htask.node.child`) sets Django up once, then makes
calls one at a time, with :func:`~django_htask.node.execution.execute` as a worker
thread would (the run signals are sent there, in the process that runs the call). The
node keeps the database: it claims, writes runs and results, as with threads.

Stopping a run (its timeout, an abort; see :mod:`~django_htask.node.supervisor`) goes
through the same three steps, each stronger than with threads:

1. its token is cancelled, in its process;
2. after ``TIMEOUT_GRACE``, :class:`~django_htask.engine.ForcedStop` is raised in the
   call by a signal, which also breaks a ``time.sleep`` or a blocking read;
3. after :data:`~django_htask.node.supervisor.FORCE_WAIT` more, its process is
   killed (SIGKILL): nothing is left running, and no thread is given up.

A process that dies (killed, out of memory, a crash in C) fails only the run it was
making, "WorkerProcessDied", retried by that run's policy, and is replaced. A process
is also replaced, between two runs, once it has made ``MAX_TASKS_PER_CHILD`` calls or
its memory has grown past ``MAX_MEMORY_PER_CHILD`` MiB. A worker process whose node
is gone (even killed with SIGKILL) ends at once, its call with it, for another node
will run that call again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import Any

from django_htask.engine import Clock, RunGuard
from django_htask.engine.codec import DEFAULT_MAX_SIZE
from django_htask.store import RunOutcome
from django_htask.store import processes as django_side

from .execution import RUN_FIELDS, Call, ended_outside
from .messages import OWN_PYTHONPATH, Broken, Cancel, Done, Exit, Force, Hello, Run
from .running import Key

__all__ = ["ProcessPool", "WorkerProcessBroken", "describe_exit"]

logger = logging.getLogger(__name__)

#: Seconds a worker process has to set Django up before the node refuses to start.
START_TIMEOUT = 120.0
#: Seconds a worker process asked to exit has before it is killed.
EXIT_WAIT = 2.0


class WorkerProcessBroken(RuntimeError):
    """A worker process could not set Django up (its traceback is the message)."""


def describe_exit(code: int | None) -> str:
    """A process's return code in words."""
    if code is None:
        return "still running"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by signal {-code} ({signal.Signals(-code).name})"
        return f"killed by signal {-code}"
    return f"exit status {code}"


#: What a worker process runs (``python -m``).
CHILD_MODULE = "django_htask.node.child"


def child_environment(environ: Mapping[str, str], path: list[str]) -> dict[str, str]:
    """The environment of a worker process: the node's, with ``path`` (the node's
    ``sys.path``) as its PYTHONPATH, so that ``python -m`` finds django_htask wherever
    the node found it; the node's own PYTHONPATH kept aside, for the child to put back
    (:func:`~django_htask.node.child.main`)."""
    env = dict(environ)
    if "PYTHONPATH" in env:
        env[OWN_PYTHONPATH] = env["PYTHONPATH"]
    env["PYTHONPATH"] = os.pathsep.join(p or os.curdir for p in path)
    return env


class Child:
    """One worker process and its two channels (see :mod:`~django_htask.node.child`)."""

    def __init__(self, config: dict[str, Any], node_id: str) -> None:
        data, data_end = socket.socketpair()
        control, control_end = socket.socketpair()
        ends = (data_end.fileno(), control_end.fileno())
        try:
            # A short command line that says what it is in ps: the node's path reaches
            # the child through PYTHONPATH (its own, if any, is put back there).
            self.process = subprocess.Popen(
                [sys.executable, "-m", CHILD_MODULE, node_id, *map(str, ends)],
                pass_fds=ends,
                stdin=subprocess.DEVNULL,
                env=child_environment(os.environ, sys.path),
            )
        finally:
            data_end.close()
            control_end.close()
        self.data = Connection(data.detach())
        self.control_channel = Connection(control.detach())
        self._control_lock = threading.Lock()
        self.ready = False
        self.seq = 0  # the last run sent
        self.data.send(Hello(config))

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until it has set Django up (:class:`WorkerProcessBroken` if it could
        not; EOFError if it died; TimeoutError past ``timeout``)."""
        if self.ready:
            return
        if timeout is not None and not self.data.poll(timeout):
            raise TimeoutError(f"worker process {self.pid} did not start in {timeout:g}s")
        answer = self.data.recv()
        if isinstance(answer, Broken):
            raise WorkerProcessBroken(answer.error)
        self.ready = True

    def run(self, seq: int, call: Call) -> Done:
        """Have it make ``call``: how it ended (EOFError or OSError if it dies
        meanwhile)."""
        self.data.send(Run(seq, call))
        while True:
            message = self.data.recv()
            if isinstance(message, Done) and message.seq == seq:
                return message

    def signal(self, message: Cancel | Force) -> None:
        """Send a control message (lost if it is gone: nothing to stop any more)."""
        with self._control_lock, contextlib.suppress(OSError):
            self.control_channel.send(message)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()

    def reap(self) -> int | None:
        """Its return code, once it has ended (killed if it has not within
        :data:`EXIT_WAIT`); the channels are closed."""
        try:
            code = self.process.wait(EXIT_WAIT)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.process.wait()
        for channel in (self.data, self.control_channel):
            channel.close()
        return code

    def stop(self) -> None:
        """Ask it to exit (between two runs)."""
        with contextlib.suppress(OSError):
            self.data.send(Exit())


class ProcessPool:
    """The worker processes of a node, one per worker thread (see the module)."""

    def __init__(
        self,
        node_id: str,
        clock: Clock,
        size: int,
        *,
        max_tasks: int = 0,
        max_memory: int = 0,
        max_result: int = DEFAULT_MAX_SIZE,
    ) -> None:
        if size < 1:
            raise django_side.misconfigured(
                f"the process pool needs a number of workers >= 1, got {size} (0, a "
                "thread per job, is for the thread pool only)"
            )
        self.node_id = node_id
        self.clock = clock
        self.size = size
        self.max_tasks = max_tasks
        self.max_memory = max_memory
        #: The largest result a call may return, encoded (checked in its process).
        self.max_result = max_result
        self._lock = threading.Lock()
        self._idle: list[Child] = []
        self._busy: dict[Key, tuple[Child, int]] = {}
        self._closed = False
        self._child_config: dict[str, Any] | None = None
        #: Worker processes started, and replaced because they died or were recycled.
        self.started = self.died = self.recycled = 0

    # -- life cycle ------------------------------------------------------------------
    def start(self) -> None:
        """Start the worker processes and wait until each has set Django up
        (ImproperlyConfigured, with the reason, if one could not)."""
        children = [self._spawn() for _ in range(self.size)]
        try:
            for child in children:
                child.wait_ready(START_TIMEOUT)
        except (WorkerProcessBroken, EOFError, OSError, TimeoutError) as exc:
            for child in children:
                child.kill()
                child.reap()
            detail = str(exc).strip() or type(exc).__name__
            raise django_side.misconfigured(
                f"the process pool could not start its worker processes: {detail}"
            ) from exc
        with self._lock:
            self._idle.extend(children)
        logger.info(
            "node %s: %d worker processes started (pids %s)",
            self.node_id,
            len(children),
            ", ".join(str(c.pid) for c in children),
            extra={"action": "pool_started", "processes": len(children)},
        )

    def _config(self) -> dict[str, Any]:
        """What a worker process is told at start (ImproperlyConfigured if it could not
        share the node's settings or databases: :mod:`django_htask.store.processes`)."""
        return {
            **django_side.config(),
            "max_tasks": self.max_tasks,
            "max_memory": self.max_memory,
            "max_result": self.max_result,
            "sys_path": list(sys.path),
        }

    def _spawn(self) -> Child:
        if self._child_config is None:
            self._child_config = self._config()
        child = Child(self._child_config, self.node_id)
        with self._lock:
            self.started += 1
        return child

    def close(self) -> None:
        """End every worker process: the idle ones are asked to exit, the ones still in
        a call (the node gave up waiting for them) are killed."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            busy = [child for child, _ in self._busy.values()]
        for child in idle:
            child.stop()
        for child in busy:
            child.kill()
        for child in idle:
            child.reap()

    # -- runs ------------------------------------------------------------------------
    def execute(
        self,
        key: Key,
        call: Call,
        guard: RunGuard,
        on_start: Callable[[], object] = lambda: None,
    ) -> RunOutcome:
        """Make ``call`` in a worker process; its outcome (never raises).
        ``on_start`` is called as the call is sent, once its worker process is ready
        (the run's timeout counts from there); the run's times and duration are the
        node's, from then to the outcome received."""
        clock = self.clock
        started_at = clock.now()
        if guard.reason is not None:  # stopped before it began: not sent
            return ended_outside(call, started_at, guard.reason, guard.retryable, clock)
        try:
            child = self._acquire()
        except OSError as exc:  # out of processes or memory
            error = f"WorkerProcessDied: no worker process could be started: {exc}"
            return ended_outside(call, started_at, error, True, clock)
        with self._lock:
            child.seq += 1
            seq = child.seq
            self._busy[key] = (child, seq)

        def forward(_token: object) -> None:
            child.signal(Cancel(seq, guard.reason or "", guard.retryable))

        guard.token.on_cancel(forward)
        try:
            child.wait_ready()
            started_at, t0 = clock.now(), clock.monotonic()
            on_start()
            done = child.run(seq, call)
        except (EOFError, OSError, WorkerProcessBroken) as exc:
            with self._lock:
                self._busy.pop(key, None)
            return self._died(child, call, started_at, guard, exc)
        with self._lock:
            self._busy.pop(key, None)
        outcome = RunOutcome(
            status=done.status,
            **{name: getattr(call, name) for name in RUN_FIELDS},
            started_at=started_at,
            finished_at=clock.now(),
            duration=clock.monotonic() - t0,
            error=done.error,
            traceback=done.traceback,
            extra=done.extra,
            result=done.result,
        )
        self._put_back(child, done.recycle)
        return outcome

    def _put_back(self, child: Child, recycle: str) -> None:
        """``child`` is done with a call: idle again, or replaced when it said why it
        must be (``recycle``: its ``MAX_TASKS_PER_CHILD`` or memory reached)."""
        if not recycle:
            self._release(child)
            return
        with self._lock:
            self.recycled += 1
        logger.info(
            "worker process %d replaced: %s",
            child.pid,
            recycle,
            extra={"action": "process_recycled", "pid": child.pid},
        )
        child.reap()
        self._replace()

    def _acquire(self) -> Child:
        """An idle worker process that is alive (one that died while idle, the OOM
        killer's choice say, is replaced without failing any run), or a new one."""
        while True:
            with self._lock:
                if not self._idle:
                    break
                child = self._idle.pop()
            if child.process.poll() is None:
                return child
            logger.warning(
                "worker process %d ended while idle (%s): replaced",
                child.pid,
                describe_exit(child.reap()),
                extra={"action": "process_died", "pid": child.pid},
            )
            with self._lock:
                self.died += 1
        return self._spawn()

    def _release(self, child: Child) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(child)
                return
        child.stop()
        child.reap()

    def _replace(self) -> None:
        """Start a worker process in place of one that ended (it sets Django up while
        the node goes on; the next run sent to it waits for that)."""
        child = self._spawn()
        with self._lock:
            kept = not self._closed
            if kept:
                self._idle.append(child)
        if not kept:
            child.kill()
            child.reap()

    def _died(
        self, child: Child, call: Call, started_at: Any, guard: RunGuard, exc: BaseException
    ) -> RunOutcome:
        """The outcome of a run whose worker process ended before it sent one."""
        if isinstance(exc, WorkerProcessBroken):
            child.kill()
        code = child.reap()
        how = describe_exit(code)
        if guard.reason is not None:
            error = f"{guard.reason}; it did not stop when forced, and its process was killed"
            retryable = guard.retryable
        elif isinstance(exc, WorkerProcessBroken):
            error = f"WorkerProcessBroken: its worker process could not start: {exc}"
            retryable = True
        else:
            error = f"WorkerProcessDied: the worker process making the call ended ({how})"
            retryable = True
            logger.error(
                "%s: its worker process %d ended during the call (%s); a new one replaces it",
                call.name,
                child.pid,
                how,
                extra={"action": "process_died", "pid": child.pid},
            )
        with self._lock:
            self.died += 1
        self._replace()
        return ended_outside(call, started_at, error, retryable, self.clock)

    # -- stopping --------------------------------------------------------------------
    def force(self, key: Key) -> bool:
        """Step 2: raise ForcedStop in the run's call; False if it is not running."""
        with self._lock:
            busy = self._busy.get(key)
        if busy is None:
            return False
        child, seq = busy
        child.signal(Force(seq))
        return True

    def kill(self, key: Key) -> int | None:
        """Step 3: kill the run's worker process (the pid), or None if it is not
        running (its worker thread then records the run)."""
        with self._lock:
            busy = self._busy.get(key)
        if busy is None:
            return None
        child = busy[0]
        child.kill()
        return child.pid
