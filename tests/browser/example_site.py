"""The example project, started for real: ``runserver`` + ``runscheduler`` on a fresh
SQLite file, as ``make example`` runs them (without the Ctrl-C loop)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MANAGE = ROOT / "example_project" / "manage.py"
USER, PASSWORD = "demo", "demo-pw-for-tests"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_for(url: str, process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"runserver exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout}s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def example_site(tmp: Path) -> Iterator[str]:
    """Yield the base URL of the example site, with its scheduler running."""
    env = {
        **os.environ,
        "HTASK_EXAMPLE_DB": str(tmp / "example.sqlite3"),
        "HTASK_EXAMPLE_USER": USER,
        "HTASK_EXAMPLE_PASSWORD": PASSWORD,
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)

    def manage(*args: str) -> list[str]:
        return [sys.executable, str(MANAGE), *args]

    subprocess.run(manage("migrate", "--no-input", "-v", "0"), env=env, check=True)
    subprocess.run(manage("setup_demo"), env=env, check=True, capture_output=True)
    port = free_port()
    logs = tmp / "logs"
    logs.mkdir()
    with (logs / "scheduler.log").open("wb") as slog, (logs / "server.log").open("wb") as wlog:
        scheduler = subprocess.Popen(
            manage("runscheduler", "--poll-interval", "0.3"),
            env=env,
            stdout=slog,
            stderr=subprocess.STDOUT,
        )
        server = subprocess.Popen(
            manage("runserver", f"127.0.0.1:{port}", "--noreload"),
            env=env,
            stdout=wlog,
            stderr=subprocess.STDOUT,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_for(f"{url}/accounts/login/", server)
            yield url
        finally:
            _stop(server)
            _stop(scheduler)
            _report_errors(logs)


def scheduler_log(tmp: Path) -> str:
    """What the scheduler of :func:`example_site` ``(tmp)`` has printed so far."""
    return (tmp / "logs" / "scheduler.log").read_text(errors="replace")


def _report_errors(logs: Path) -> None:
    """Print the servers' tracebacks (pytest shows them with a failing test)."""
    for log in sorted(logs.iterdir()):
        text = log.read_text(errors="replace")
        if "Traceback" in text:
            print(f"--- {log.name} ---\n{text[-8000:]}")
