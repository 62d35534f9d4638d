"""``make example``'s script: it migrates, creates the demo user, starts the web server
and the scheduler, prints where to sign in, and stops both on SIGINT, SIGTERM or SIGHUP
(also when started with SIGINT ignored, as ``&`` and ``nohup`` start it), or when it is
killed.

Every wait here has a bound; whatever happens, the test ends by killing every process
of the example it started (found by its database path in their environment), so a
failure is reported instead of hanging, and leaves nothing on the port.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .example_site import ROOT, free_port

pytestmark = pytest.mark.slow

RUN_PY = ROOT / "example_project" / "run.py"
#: Seconds for the example to migrate and start both processes.
START_TIMEOUT = 90.0
#: Seconds for run.py to stop both processes and exit (the scheduler has no jobs).
STOP_TIMEOUT = 45.0


@dataclass
class Example:
    """run.py, started in ``tmp``: its process, log file, address and marker."""

    process: subprocess.Popen[bytes]
    log: Path
    address: str
    marker: str

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def processes(self) -> list[int]:
        """The live processes of this example (run.py and its children, orphans too)."""
        return _processes_with(f"HTASK_EXAMPLE_DB={self.marker}".encode())

    def port_is_free(self) -> bool:
        """Whether a new server could listen on the address (nothing listens there)."""
        host, port = self.address.split(":")
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, int(port)))
                sock.listen()
            except OSError:
                return False
            return True


def _processes_with(entry: bytes) -> list[int]:
    """The pids of the live (not zombie) processes whose environment holds ``entry``."""
    found = []
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if entry in environ and state != "Z":
            found.append(pid)
    return found


def wait_until(condition: Callable[[], bool], timeout: float, what: str, example: Example) -> None:
    """Poll ``condition`` every 0.1 s; fail naming ``what``, with run.py's output, after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout:g}s; run.py printed:\n{example.output()}")
        time.sleep(0.1)


def kill_all(example: Example) -> None:
    """SIGKILL every process of the example and reap run.py (bounded waits)."""
    deadline = time.monotonic() + 10
    while (left := example.processes()) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    with contextlib.suppress(subprocess.TimeoutExpired):
        example.process.wait(5)


def _default_signals() -> None:
    """In the child, before exec: the stop signals at their defaults."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


@contextlib.contextmanager
def example(tmp_path: Path, *, ignore_sigint: bool = False) -> Iterator[Example]:
    """Start run.py (through ``sh`` with SIGINT ignored, as ``&`` does, if asked) and
    wait until the site answers and the scheduler has printed its banner; kill all that
    is left of it at the end."""
    address = f"127.0.0.1:{free_port()}"
    marker = str(tmp_path / "db.sqlite3")
    env = {
        **os.environ,
        "HTASK_EXAMPLE_DB": marker,
        "HTASK_EXAMPLE_ADDRESS": address,
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    command = [sys.executable, str(RUN_PY)]
    if ignore_sigint:
        command = ["sh", "-c", 'trap "" INT; exec "$@"', "sh", *command]
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        # From a terminal's defaults, whatever this run inherited: under `nohup make test`
        # SIGHUP comes ignored, and run.py rightly keeps it so (the SIGHUP test's case).
        process = subprocess.Popen(
            command,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_default_signals,  # noqa: PLW1509 - a single-threaded test process
        )
    started = Example(process, log, address, marker)
    try:
        wait_until(
            lambda: "sign in as" in started.output() and "\n  node:" in started.output(),
            START_TIMEOUT,
            "the site and the scheduler did not start",
            started,
        )
        yield started
    finally:
        kill_all(started)


def assert_stopped_cleanly(started: Example) -> None:
    """run.py exits 0, after stopping both processes, and the port is free."""
    try:
        code = started.process.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"run.py did not exit within {STOP_TIMEOUT:g}s:\n{started.output()}")
    assert code == 0, started.output()
    output = started.output()
    assert "stopping" in output
    assert output.rstrip().endswith("stopped."), output  # the scheduler stopped last
    assert started.processes() == []
    assert started.port_is_free()


def test_run_py_starts_the_site_and_the_scheduler_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    with example(tmp_path) as started:
        banner = started.output()
        assert f"open http://{started.address}/ and sign in as demo / demo" in banner
        assert "created the superuser 'demo'" in banner
        url = f"http://{started.address}/accounts/login/"
        with urllib.request.urlopen(url, timeout=10) as page:
            assert page.status == 200
            assert b"Sign in" in page.read()
        assert len(started.processes()) == 3  # run.py, runserver, runscheduler
        started.process.send_signal(signal.SIGINT)
        assert_stopped_cleanly(started)


@pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name
)
def test_run_py_started_with_sigint_ignored_stops_both_on_a_signal(
    tmp_path: Path, signum: signal.Signals
) -> None:
    with example(tmp_path, ignore_sigint=True) as started:
        assert len(started.processes()) == 3
        started.process.send_signal(signum)
        assert_stopped_cleanly(started)
        assert f"stopping ({signum.name})" in started.output()


def test_killing_run_py_takes_both_processes_down(tmp_path: Path) -> None:
    with example(tmp_path) as started:
        children = [pid for pid in started.processes() if pid != started.process.pid]
        assert len(children) == 2
        started.process.kill()
        started.process.wait(10)
        wait_until(
            lambda: not started.processes() and started.port_is_free(),
            STOP_TIMEOUT,
            "the web server and the scheduler did not stop after run.py was killed",
            started,
        )


#: Seconds for ``make example`` to make its venv and install the package from the index.
INSTALL_TIMEOUT = 600.0
#: The account a test run as root runs ``make example`` as: no root, no sudo.
NOBODY = 65534
#: The commands ``make example`` may find on the PATH: make, a shell, the ones its
#: recipes call, and Python.
NEEDED = ("make", "sh", "cat", "cksum", "cut", "rm", "touch", "test", "python3")


def _copy_tree(to: Path) -> None:
    """The repository's files as a fresh clone has them (the tracked ones, as they are in
    the working tree), to ``to``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, to / name)


def _as_nobody() -> None:
    """In the child, before exec: the stop signals at their defaults, and, under root,
    the unprivileged ``nobody``."""
    _default_signals()
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)


def test_make_example_runs_without_root_nor_apt(tmp_path: Path) -> None:
    """From a copy of the repository, with no ``.venv``, as a user who is not root and
    whose ``apt-get`` and ``sudo`` fail: the venv is made, the package installed, the
    site and the scheduler run, and neither was called."""
    if shutil.which("make") is None or not Path("/usr/bin/python3").exists():
        pytest.fail("this test needs make and a system python3 (/usr/bin/python3)")
    work = Path(tempfile.mkdtemp(prefix="htask-make-example-"))
    try:
        work.chmod(0o755)  # nobody goes through it (pytest's own tmp dirs are private)
        clone, shims, home = work / "clone", work / "shims", work / "home"
        for path in (clone, shims, home):
            path.mkdir()
        _copy_tree(clone)
        called = work / "called"
        for name in ("apt-get", "sudo"):
            shim = shims / name
            shim.write_text(f'#!/bin/sh\necho "{name} $*" >> {called}\nexit 1\n')
            shim.chmod(0o755)
        # The PATH holds only these: none of the system packages make test needs
        # (chromium, the servers, pkg-config) is found, as on a machine without them.
        for name in NEEDED:
            found = shutil.which(name, path="/usr/local/bin:/usr/bin:/bin")
            assert found is not None, f"{name} is not installed"
            (shims / name).symlink_to(found)
        if os.geteuid() == 0:
            for path in [work, *work.rglob("*")]:
                os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
        address = f"127.0.0.1:{free_port()}"
        marker = str(work / "db.sqlite3")
        env = {
            "PATH": str(shims),
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "PYTHON": "/usr/bin/python3",
            "HTASK_EXAMPLE_DB": marker,
            "HTASK_EXAMPLE_ADDRESS": address,
            "PYTHONUNBUFFERED": "1",
            # The machine's package index, as pip finds it for any user.
            **{k: v for k, v in os.environ.items() if k.startswith("PIP_")},
        }
        log = work / "make.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["make", "example"],
                cwd=clone,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_as_nobody,  # noqa: PLW1509 - a single-threaded test process
            )
        started = Example(process, log, address, marker)
        try:
            wait_until(
                lambda: (
                    process.poll() is not None
                    or ("sign in as" in started.output() and "\n  node:" in started.output())
                ),
                INSTALL_TIMEOUT,
                "make example did not start the site and the scheduler",
                started,
            )
            assert process.poll() is None, f"make example exited:\n{started.output()}"
            url = f"http://{address}/accounts/login/"
            with urllib.request.urlopen(url, timeout=10) as page:
                assert page.status == 200
            assert not called.exists(), called.read_text()
            if os.geteuid() == 0:
                owners = {Path(f"/proc/{pid}").stat().st_uid for pid in started.processes()}
                assert owners == {NOBODY}
            os.killpg(process.pid, signal.SIGINT)  # Ctrl-C in the terminal
            process.wait(STOP_TIMEOUT)
            assert "\nstopped." in started.output(), started.output()
        finally:
            kill_all(started)
    finally:
        shutil.rmtree(work, ignore_errors=True)
