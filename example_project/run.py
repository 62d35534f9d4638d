"""Quick start (``make example``): migrate, create the demo user, run the site and the
scheduler.

Migrates the SQLite database, creates the demo superuser (demo / demo) and the
admin-defined example schedule (``manage.py setup_demo``), then starts
``manage.py runscheduler`` and ``manage.py runserver`` side by side and prints where to
sign in.

Both are stopped, the web server first and then the scheduler (SIGTERM: it finishes its
running jobs), when this script gets SIGINT (Ctrl-C), SIGTERM or SIGHUP (its terminal
closed), or when either of them exits. The handlers are installed explicitly, so a
SIGINT stops it even when it was started with SIGINT ignored, as a shell does for a
command started with ``&``; a SIGHUP ignored by ``nohup`` stays ignored, as asked. A
second signal while stopping is passed on (the scheduler then exits at once). Each
child runs in a process group of its own, which is what is signalled, and on Linux
gets SIGTERM from the kernel if this script dies without stopping it (``kill -9``), so
nothing is left holding the port.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import FrameType

HERE = Path(__file__).resolve().parent
ADDRESS = os.environ.get("HTASK_EXAMPLE_ADDRESS", "127.0.0.1:8000")

#: The signals that stop the example.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Seconds a child gets after a second signal before it is killed.
HURRY = 5.0
#: Linux's ``prctl`` option: the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1

#: The stop signals received so far (appended by the handler, read by the main loop).
received: list[int] = []


def manage(*args: str) -> list[str]:
    return [sys.executable, str(HERE / "manage.py"), *args]


def say(text: str, *, error: bool = False) -> None:
    """Print ``text``; quietly nothing if the terminal is gone (after a SIGHUP)."""
    with contextlib.suppress(OSError):
        print(text, file=sys.stderr if error else sys.stdout, flush=True)


def on_signal(signum: int, frame: FrameType | None) -> None:
    received.append(signum)  # only a flag: the main loop does the work


def handle_stop_signals() -> None:
    """Install :func:`on_signal` for each stop signal (SIGHUP only if not ignored)."""
    for sig in STOP_SIGNALS:
        if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
            continue  # nohup: the user asked to outlive the terminal
        signal.signal(sig, on_signal)


def _die_with_parent(parent: int) -> Callable[[], None]:
    """The child's set-up (Linux): SIGTERM when ``parent`` dies, even by SIGKILL."""

    def setup() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # it died before prctl took effect
            os._exit(1)

    return setup


def start(*args: str) -> subprocess.Popen[bytes]:
    """Start ``manage.py *args`` in a process group of its own (the terminal's Ctrl-C
    reaches this script only, which stops the children in order)."""
    setup = _die_with_parent(os.getpid()) if sys.platform == "linux" else None
    return subprocess.Popen(manage(*args), start_new_session=True, preexec_fn=setup)  # noqa: PLW1509


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group is empty: all gone
        os.killpg(process.pid, sig)


def stop(process: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM ``process``'s group and wait up to ``timeout`` seconds (``HURRY`` after a
    further stop signal, which is passed on), then SIGKILL the group."""
    if process.poll() is not None:
        return
    _signal_group(process, signal.SIGTERM)
    seen = len(received)
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        if len(received) > seen:
            seen = len(received)
            _signal_group(process, signal.SIGTERM)
            deadline = min(deadline, time.monotonic() + HURRY)
        time.sleep(0.1)
    if process.poll() is None:
        _signal_group(process, signal.SIGKILL)
        process.wait()


def wait_until_serving(server: subprocess.Popen[bytes], timeout: float = 60.0) -> bool:
    """Wait for the web server to answer (False if it exited, did not answer, or a
    stop signal came)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and server.poll() is None and not received:
        try:
            with urllib.request.urlopen(f"http://{ADDRESS}/accounts/login/", timeout=2):
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            time.sleep(0.2)
    return False


def prepare() -> int:
    """Migrate and create the demo data; the exit code of the step that failed, or 0."""
    for step in (manage("migrate", "--no-input", "-v", "0"), manage("setup_demo")):
        code = subprocess.run(step, check=False).returncode
        if code or received:
            return code
    return 0


def main() -> int:
    handle_stop_signals()
    code = prepare()
    if received:
        say("\nstopped before the site started.")
        return 0
    if code:
        say(f"the example could not be prepared (exit code {code})", error=True)
        return code
    scheduler = start("runscheduler")
    server = start("runserver", ADDRESS, "--noreload")
    try:
        if wait_until_serving(server):
            user = os.environ.get("HTASK_EXAMPLE_USER", "demo")
            password = os.environ.get("HTASK_EXAMPLE_PASSWORD", "demo")
            say(
                f"\ndjango-htask example: open http://{ADDRESS}/ and sign in as {user} / "
                f"{password}\n  the admin: http://{ADDRESS}/admin/  (Ctrl-C stops both "
                "processes)\n"
            )
            while not received and scheduler.poll() is None and server.poll() is None:
                time.sleep(0.2)
        elif not received:
            say(f"the web server did not start on {ADDRESS}", error=True)
            return 1
        if not received:
            return 1  # one of them died on its own
        say(f"\nstopping ({signal.Signals(received[0]).name})…")
        return 0
    finally:
        stop(server, timeout=10)
        stop(scheduler, timeout=35)


if __name__ == "__main__":
    sys.exit(main())
