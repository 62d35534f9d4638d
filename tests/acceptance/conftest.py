"""Run ``manage.py runscheduler`` as a subprocess on a temporary SQLite file.

The test process reads and writes the same file with the ``sqlite3`` module, and runs
Django code against it in short helper subprocesses (``django_code``), as another
process of the site would. Waits poll every 50 ms up to a bound; nothing sleeps a fixed
time.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = "tests.acceptance.settings"


def _env(db: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE=SETTINGS,
        HTASK_ACCEPTANCE_DB=str(db),
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def python(
    tmp_path: Path, settings: str, *args: str, database: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """``python *args`` on the SQLite file ``database`` (default: a fresh one in
    ``tmp_path``, not migrated), with the acceptance settings plus the lines
    ``settings`` and the variables ``env``; ``tmp_path`` is on the path, for apps
    written there."""
    (tmp_path / "check_settings.py").write_text(
        f"from tests.acceptance.settings import *  # noqa: F403\n{settings}\n"
    )
    db = database or tmp_path / "db.sqlite3"
    env = _env(db, DJANGO_SETTINGS_MODULE="check_settings", **env)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    env.pop("HTASK_TEST_DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, *args],
        check=False,  # the caller asserts on the exit code
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def manage(
    tmp_path: Path, settings: str, *args: str, database: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """``python -m django *args``, as :func:`python` runs it."""
    return python(tmp_path, settings, "-m", "django", *args, database=database, **env)


@pytest.fixture(scope="session")
def migrated_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("template") / "db.sqlite3"
    subprocess.run(
        [sys.executable, "-m", "django", "migrate", "-v", "0", "--no-input"],
        env=_env(db),
        check=True,
        cwd=ROOT,
        timeout=120,
    )
    return db


@pytest.fixture
def db_file(migrated_template: Path, tmp_path: Path) -> Path:
    db = tmp_path / "db.sqlite3"
    shutil.copy(migrated_template, db)
    return db


def wait_until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``condition`` every 50 ms until it returns something true."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


class Scheduler:
    """A ``runscheduler`` subprocess and what it printed."""

    def __init__(self, db: Path, args: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "django", "runscheduler", *args],
            env=_env(db, **env),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.process.stdout, self.out), daemon=True),
            threading.Thread(target=self._read, args=(self.process.stderr, self.err), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream: Any, into: list[str]) -> None:
        for line in stream:
            into.append(line)

    @property
    def stdout(self) -> str:
        return "".join(self.out)

    @property
    def stderr(self) -> str:
        return "".join(self.err)

    def wait_ready(self, timeout: float = 30) -> None:
        wait_until(
            lambda: "stop:" in self.stdout or self.process.poll() is not None,
            timeout,
            "the banner",
        )
        assert self.process.poll() is None, self.stderr

    def send(self, sig: int = signal.SIGTERM) -> None:
        self.process.send_signal(sig)

    def wait_exit(self, timeout: float = 30) -> int:
        code = self.process.wait(timeout)
        for reader in self._readers:
            reader.join(5)
        return code

    def kill(self) -> None:
        """Kill the process if it still runs, and close its pipes."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        for reader in self._readers:
            reader.join(5)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def start_scheduler(db_file: Path) -> Iterator[Callable[..., Scheduler]]:
    started: list[Scheduler] = []

    def start(*args: str, **env: str) -> Scheduler:
        scheduler = Scheduler(db_file, list(args), env)
        started.append(scheduler)
        scheduler.wait_ready()
        return scheduler

    yield start
    for scheduler in started:
        scheduler.kill()


@pytest.fixture
def django_code(db_file: Path) -> Callable[[str], str]:
    """Run Python with Django set up on the test database, in another process."""

    def run(code: str) -> str:
        script = "import django\ndjango.setup()\n" + code
        result = subprocess.run(
            [sys.executable, "-c", script],
            env=_env(db_file),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    return run


@pytest.fixture
def query(db_file: Path) -> Callable[..., list[tuple[Any, ...]]]:
    """Read the test database with the sqlite3 module."""

    def run(sql: str, *params: Any) -> list[tuple[Any, ...]]:
        connection = sqlite3.connect(db_file, timeout=10)
        try:
            return connection.execute(sql, params).fetchall()
        finally:
            connection.close()

    return run
