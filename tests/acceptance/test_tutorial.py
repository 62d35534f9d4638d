"""docs/tutorial.md, followed step by step in a new ``startproject``.

The page is read in order: each Python block that starts with ``# file: PATH`` is
written to PATH (``(add at the end)``: appended), and each ``$ `` command of a console
block is run as the page says, with this interpreter for ``python`` and
``django-admin`` (the package is installed in this environment, so the ``pip`` lines
are only checked to name the package). ``runscheduler`` runs as a subprocess; ``curl``
commands go through Django's test client in ``manage.py shell -c``, and their answers
are compared with the page's. A command the page adds that this test does not know
fails the test. Every wait polls with a bound; nothing sleeps a fixed time.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from .conftest import wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "tutorial.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
FILE_MARK = re.compile(r"# file: (\S+)( \(add at the end\))?\n")
#: How long the scheduler may take to do what the page says it does (the periodic job
#: fires every 10 s, the first one-off task is due 10 s after it was scheduled).
WAIT = 40.0

CLIENT_CODE = """
import json
from django.test import Client

client = Client(HTTP_HOST="127.0.0.1")
method, path, data = json.loads({request!r})
response = client.post(path, data) if method == "POST" else client.get(path)
print(json.dumps([response.status_code, response.content.decode()]))
"""


#: Step 8's schedule added in the admin: its name, function and schedule.
ADMIN_STEP = re.compile(
    r"\*Add schedule\*, name `([^`]+)`,\s+function `([^`]+)`, schedule `([^`]+)`, \*Save\*"
)
ADMIN_CODE = """
import json
from django.contrib.auth.models import User
from django.test import Client
from django_htask.models import Schedule

name, function, text = json.loads({step!r})
client = Client(HTTP_HOST="127.0.0.1")
client.force_login(User.objects.create_superuser("you", "you@example.com", "pw"))
code = Schedule.objects.get(function=function, origin="code")
page = client.get(f"/admin/django_htask/schedule/{{code.pk}}/change/").content.decode()
form = dict(
    name=name, function=function, schedule=text, timezone="UTC", enabled="on",
    call_args="[]", call_kwargs="{{}}", catch_up="latest", overlap="skip",
    max_attempts="1", retry_backoff="10", queue_name="default",
)
added = client.post("/admin/django_htask/schedule/add/", form)
print(json.dumps([page, 'name="schedule"' in page, added.status_code]))
"""


def page_steps(text: str) -> list[tuple[str, Any]]:
    """The page's files and commands, in order: ("file", (path, append, content)) and
    ("command", (command, expected output lines))."""
    steps: list[tuple[str, Any]] = []
    for match in FENCE.finditer(text):
        language, body = match.group(1), match.group(2)
        if language == "python":
            mark = FILE_MARK.match(body)
            if mark:
                steps.append(("file", (mark.group(1), bool(mark.group(2)), body)))
        elif language == "console":
            for line in body.splitlines():
                if line.startswith("$ "):
                    steps.append(("command", [line[2:], []]))
                else:
                    steps[-1][1][1].append(line)
    return steps


def env() -> dict[str, str]:
    environ = dict(os.environ)
    environ.pop("DJANGO_SETTINGS_MODULE", None)  # manage.py sets the project's own
    environ["PYTHONUNBUFFERED"] = "1"
    return environ


def loose(line: str) -> re.Pattern[str]:
    """A page's output line as a pattern: its numbers may differ."""
    return re.compile(re.sub(r"\d+", r"\\d+", re.escape(line)))


class Tutorial:
    def __init__(self, tmp: Path) -> None:
        self.cwd = tmp
        self.scheduler: subprocess.Popen[bytes] | None = None
        self.scheduler_err = tmp / "runscheduler.err"
        self.scheduler_out = tmp / "runscheduler.out"

    # -- running what the page says -------------------------------------------------

    def run(self, *args: str) -> str:
        result = subprocess.run(
            [sys.executable, *args],
            cwd=self.cwd,
            env=env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result.stdout

    def write(self, path: str, append: bool, content: str) -> None:
        target = self.cwd / path
        assert target.parent.is_dir(), f"the page writes {path} before its directory exists"
        if append:
            assert target.exists(), f"the page adds to {path}, which does not exist"
            with target.open("a") as f:
                f.write("\n" + content)
        else:
            target.write_text(content)

    def command(self, command: str, expected: list[str]) -> None:
        words = shlex.split(command)
        if words[:2] == ["pip", "install"] or command.startswith(
            ("python -m venv", ". .venv/bin/activate")
        ):
            return  # the package is installed here; the pip line is checked on its own
        if words[:2] == ["django-admin", "startproject"]:
            self.run("-m", "django", *words[1:])
        elif words[0] == "cd":
            self.cwd = self.cwd / words[1]
        elif words[:3] == ["python", "manage.py", "runscheduler"]:
            self.start_scheduler(words[3:], expected)
        elif words[:3] == ["python", "manage.py", "runserver"]:
            return  # the curl commands go through the test client instead
        elif words[:2] == ["python", "manage.py"]:
            output = self.run(*words[1:])
            if expected:
                first = re.split(r"\d", expected[0], maxsplit=1)[0]
                assert output.startswith(first), (command, output)
        elif words[0] == "curl":
            self.curl(words[1:], expected)
        else:
            raise AssertionError(f"the page has a command this test does not follow: {command}")

    def start_scheduler(self, args: list[str], expected: list[str]) -> None:
        assert self.scheduler is None
        with self.scheduler_out.open("w") as out, self.scheduler_err.open("w") as err:
            self.scheduler = subprocess.Popen(
                [sys.executable, "manage.py", "runscheduler", *args],
                cwd=self.cwd,
                env=env(),
                stdout=out,
                stderr=err,
            )
        wait_until(
            lambda: "stop:" in self.scheduler_out.read_text() or self.scheduler.poll() is not None,
            WAIT,
            "runscheduler's banner",
        )
        assert self.scheduler.poll() is None, self.scheduler_err.read_text()
        out = self.scheduler_out.read_text()
        assert out.startswith(re.split(r"\d", expected[0], maxsplit=1)[0]), out
        for line in expected[1:]:
            if line.startswith("  ") and ":" in line:
                assert line.split(":")[0] + ":" in out, (line, out)
        # The page's log lines of the periodic job appear, with their timestamps.
        for line in expected:
            if " reminders.tasks " in line:
                pattern = loose(line)
                wait_until(
                    lambda p=pattern: p.search(self.scheduler_err.read_text()),
                    WAIT,
                    f"a line like {line!r} from runscheduler",
                )
        # The periodic job ran under its default name, the function's registered name.
        wait_until(
            lambda: self.query(
                "SELECT status FROM django_htask_run WHERE name = ? AND status = 'succeeded'",
                "reminders.tasks:count_waiting",
            ),
            WAIT,
            "a succeeded run of the schedule reminders.tasks:count_waiting",
        )

    def client(self, method: str, path: str, data: dict[str, str]) -> tuple[int, Any]:
        request = json.dumps([method, path, data])
        output = self.run("manage.py", "shell", "-c", CLIENT_CODE.format(request=request))
        status, content = json.loads(output.strip().splitlines()[-1])
        return status, json.loads(content)

    def curl(self, args: list[str], expected: list[str]) -> None:
        method, data, url = "GET", {}, None
        words = iter(args)
        for word in words:
            if word == "-X":
                method = next(words)
            elif word == "-d":
                key, _, value = next(words).partition("=")
                data[key] = value
                method = "POST"
            else:
                assert url is None, args
                url = word
        assert url is not None, args
        path = urlsplit(url).path
        want = json.loads(expected[0])

        def answer() -> Any:
            status, got = self.client(method, path, data)
            assert status in (200, 201), (status, got)
            return got if matches(got, want) else None

        if method == "GET":  # the page may show a later state: wait for it
            wait_until(answer, WAIT, f"GET {path} to answer {want}")
        else:
            _, got = self.client(method, path, data)
            assert matches(got, want), (args, got, want)

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        connection = sqlite3.connect(self.cwd / "db.sqlite3", timeout=20)
        try:
            with connection:  # a write is committed
                return connection.execute(sql, params).fetchall()
        finally:
            connection.close()

    def stop(self) -> None:
        if self.scheduler is not None and self.scheduler.poll() is None:
            self.scheduler.kill()
            self.scheduler.wait(10)


def matches(got: dict[str, Any], want: dict[str, Any]) -> bool:
    """The same keys and values, but for times: both set, or both not."""
    if set(got) != set(want):
        return False
    for key, value in want.items():
        if key.endswith("_at"):
            if (value is None) != (got[key] is None):
                return False
        elif got[key] != value:
            return False
    return True


def test_the_install_line_names_this_package() -> None:
    text = PAGE.read_text()
    name = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    assert f"$ pip install {name}\n" in text
    assert f"pip install /path/to/{name}" in text
    readme = (ROOT / "README.md").read_text()
    assert f"pip install {name}" in readme
    assert f"pip install /path/to/{name}" in readme


def test_every_step_of_the_tutorial_runs(tmp_path: Path) -> None:
    steps = page_steps(PAGE.read_text())
    assert [kind for kind, _ in steps].count("file") == 6, steps
    tutorial = Tutorial(tmp_path)
    try:
        for kind, step in steps:
            if kind == "file":
                tutorial.write(*step)
            else:
                tutorial.command(*step)
        assert tutorial.scheduler is not None, "the page never starts runscheduler"
        log = tutorial.scheduler_err.read_text()
        # The one-off task of step 6 ran on the scheduler, and logged what the page says.
        assert "INFO reminders.tasks reminder 1: Call mum" in log, log
        assert tutorial.query("SELECT status FROM django_htask_task ORDER BY id") == [
            ("succeeded",),
            ("cancelled",),
        ]

        # A cancelled task does not run, even once its time has passed: cancel one due in
        # an hour, move it into the past behind the scheduler's back, then wait for one
        # due after it. (Due in a second, it could run before the dismiss got there: each
        # client call is a process of its own.)
        _, created = tutorial.client("POST", "/reminders/", {"text": "no", "delay": "3600"})
        cancelled = created["id"]
        assert tutorial.client("POST", f"/reminders/{cancelled}/dismiss/", {}) == (
            200,
            {"id": cancelled, "cancelled": True},
        )
        long_ago = "2000-01-01 00:00:00"
        tutorial.query(
            "UPDATE django_htask_task SET run_at = ? WHERE status = ?", long_ago, "cancelled"
        )
        due = "SELECT count(*) FROM django_htask_task WHERE status = ? AND run_at <= ?"
        assert tutorial.query(due, "cancelled", long_ago) == [(2,)]  # this one and step 7's
        _, later = tutorial.client("POST", "/reminders/", {"text": "yes", "delay": "1.5"})
        wait_until(
            lambda: (
                tutorial.client("GET", f"/reminders/{later['id']}/", {})[1]["task"] == "succeeded"
            ),
            WAIT,
            "the task due after the cancelled one",
        )
        _, gone = tutorial.client("GET", f"/reminders/{cancelled}/", {})
        assert gone["task"] == "cancelled"
        assert gone["sent_at"] is None
        assert not tutorial.query(
            "SELECT r.id FROM django_htask_run r JOIN django_htask_task t ON r.task_id = t.id "
            "WHERE t.status = 'cancelled'"
        )

        # Step 8: the code-defined schedule is read-only in the admin and says where its
        # code is; the one the page adds there is fired by the running scheduler.
        step = ADMIN_STEP.search(" ".join(PAGE.read_text().split()))
        assert step, "step 8 no longer says which schedule to add in the admin"
        code = ADMIN_CODE.format(step=json.dumps(step.groups()))
        output = tutorial.run("manage.py", "shell", "-c", code)
        page, editable, added = json.loads(output.strip().splitlines()[-1])
        assert not editable and added == 302, output
        assert "Defined in the code" in page and "reminders/tasks.py, line" in page
        wait_until(
            lambda: tutorial.query(
                "SELECT id FROM django_htask_run WHERE name = ? AND status = 'succeeded'",
                step.group(1),
            ),
            WAIT,
            f"a succeeded run of the schedule {step.group(1)} added in the admin",
        )

        # Ctrl-C stops it, letting running tasks finish.
        tutorial.scheduler.send_signal(signal.SIGINT)
        assert tutorial.scheduler.wait(30) == 0, tutorial.scheduler_err.read_text()
    finally:
        tutorial.stop()
