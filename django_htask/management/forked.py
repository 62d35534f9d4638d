"""``runscheduler --processes N``: N nodes, each in a process forked from the command once
Django is set up.

A node is one process: its workers share one interpreter lock, so a host with several
cores runs several nodes. Started as separate commands, each pays Django's start-up
(most of it ``django.setup()``) and holds its own copy of every module; forked from one
set-up process, they share both (its objects frozen before the fork: a node's full
collections leave them, and the pages holding them, alone). The parent runs no node and
starts no thread: it forks, forwards stop signals and replaces a node process that
died, as gunicorn's arbiter does for its workers.

- **Signals.** SIGTERM or SIGINT to the parent is forwarded to every node process as
  SIGTERM: the first stops them as a node stops (running jobs get
  ``SHUTDOWN_TIMEOUT``), a second ends them at once. A node process ignores SIGINT: the
  Ctrl-C of a terminal reaches the whole foreground group, and is the parent's to
  forward (taken by each node as well, the parent's forwarding would be its second).
- **A node process that ends.** Replaced by a new one (a new node: another process,
  another id), unless the group is stopping, or the node ended by itself as asked
  (``--batch``, ``--max-tasks``: status 0). A process that ran less than
  ``min_uptime`` is replaced once that much time has passed since it started, so that
  one dying at once is not restarted in a loop. One that ends before its node has
  started (a database not migrated, a bad code-defined schedule) stops the group: the
  parent exits with its status.
- **The parent gone** (killed with SIGKILL): each node process sees it and stops as on
  SIGTERM (:meth:`Forked.orphaned`).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

__all__ = ["Forked", "exit_status"]

logger = logging.getLogger("django_htask.management.forked")

#: The signals that stop the group.
_STOPS = {signal.SIGTERM, signal.SIGINT}

#: Runs one node in a forked process: called with its slot (0 to N - 1) and a callable
#: to call once its node has started; returns the process's exit status.
RunNode = Callable[[int, Callable[[], None]], int]


def exit_status(wait_status: int) -> int:
    """A child's ``waitpid`` status as a shell would give it: its exit status, or 128 +
    the signal that killed it."""
    code = os.waitstatus_to_exitcode(wait_status)
    return code if code >= 0 else 128 - code


@dataclass
class _Child:
    slot: int
    pid: int
    began: float
    #: The read end of the pipe the child writes a byte to once its node has started.
    ready_fd: int

    def started(self) -> bool:
        """Whether its node had started (the byte was written), read once it has ended."""
        try:
            return os.read(self.ready_fd, 1) == b"1"
        except OSError:
            return False
        finally:
            os.close(self.ready_fd)


class Forked:
    """The parent of ``count`` node processes (see the module). ``finite``: a node ends
    by itself when its work is done (``--batch``, ``--max-tasks``), and is not replaced
    when it does."""

    def __init__(
        self,
        count: int,
        run_node: RunNode,
        *,
        finite: bool = False,
        min_uptime: float = 5.0,
        write: Callable[[str], object] = print,
    ) -> None:
        self.count = count
        self.run_node = run_node
        self.finite = finite
        self.min_uptime = min_uptime
        self.write = write
        self.children: dict[int, _Child] = {}
        self.stopping = False
        #: The exit status of the group: the first of a node process's that is not 0.
        self.status = 0
        #: Node processes started in all, the first ``count`` included.
        self.forked = 0
        self._parent = os.getpid()

    # -- the parent --------------------------------------------------------------------
    def run(self) -> int:
        """Fork the node processes and wait until every one has ended; the group's exit
        status. Signal handlers are put back as they were."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in _STOPS}
        try:
            for slot in range(self.count):
                self._fork(slot)
            self.write(
                f"{self.count} nodes, in processes {', '.join(map(str, self.children))} "
                f"forked from {self._parent}; stop: Ctrl-C or SIGTERM to {self._parent} "
                "(a second one ends them at once)"
            )
            while self.children:
                try:
                    pid, wait_status = os.waitpid(-1, 0)
                except ChildProcessError:  # pragma: no cover - none left that we know of
                    break
                child = self.children.pop(pid, None)
                if child is not None:
                    self._ended(child, exit_status(wait_status))
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return self.status

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):  # ended meanwhile: waitpid has it
                os.kill(pid, signal.SIGTERM)

    def _ended(self, child: _Child, status: int) -> None:
        started = child.started()
        if self.stopping or (status == 0 and self.finite):
            if status == 128 + signal.SIGTERM:
                status = 0  # the SIGTERM forwarded came before its node took the signal
            self.status = self.status or status
            return
        if not started:
            self.write(
                f"node process {child.pid} exited with status {status} before its node "
                "started: stopping the others"
            )
            self.status = self.status or status or 1
            self._on_signal(signal.SIGTERM, None)
            return
        wait = child.began + self.min_uptime - time.monotonic()
        logger.warning(
            "node process %s exited with status %s: starting another%s",
            child.pid,
            status,
            f" in {wait:.1f}s" if wait > 0 else "",
            extra={"action": "node_process_replaced", "pid": child.pid, "status": status},
        )
        deadline = time.monotonic() + wait
        while not self.stopping and time.monotonic() < deadline:
            time.sleep(min(0.1, max(deadline - time.monotonic(), 0)))
        if not self.stopping:
            self._fork(child.slot)

    def _fork(self, slot: int) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        read_fd, write_fd = os.pipe()
        # A stop signal between the fork and the child's entry in ``children`` would not
        # be forwarded to it: held until the entry is made.
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
        # What the set-up process holds, frozen before the fork, as Python's gc.freeze()
        # documentation advises: a node process's full collections then leave those
        # objects alone rather than writing to each, which would copy every page that
        # holds one and end the sharing of them with the other node processes.
        gc.freeze()
        try:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child's coverage is not collected
                os.close(read_fd)
                self._child(slot, write_fd)
            os.close(write_fd)
            self.children[pid] = _Child(slot, pid, time.monotonic(), read_fd)
            self.forked += 1
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)

    # -- a node process ----------------------------------------------------------------
    def _child(self, slot: int, ready_fd: int) -> None:  # pragma: no cover - in the child
        """Run a node in this forked process and end the process with its status."""
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)
        for other in self.children.values():
            os.close(other.ready_fd)  # the other children's: theirs to write
        self.children = {}
        status = 1

        def ready() -> None:
            os.write(ready_fd, b"1")

        try:
            status = self.run_node(slot, ready)
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # the process ends with it: said, as an uncaught one is
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)

    def orphaned(self) -> bool:
        """In a node process: whether the parent has gone (the process was handed to
        another parent)."""
        return os.getppid() != self._parent
