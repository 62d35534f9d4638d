"""docs/howto-several-nodes.md, followed in a new ``startproject``.

The settings block is added to the project's ``settings.py`` as the page gives it (the
project has ``django_htask`` installed, as the page presumes), and the commands of "To
try it on one machine" run in one shell, in order, as the page writes them: as root
through ``runuser -u postgres --``, as another user without it and without the
``chown`` line, as the page says. Two changes only, so that runs never collide: the
server's folder is a fresh one in ``/tmp`` instead of ``/tmp/pg`` and the port a free
one instead of 5433. ``python`` is this interpreter. Then two ``runscheduler`` nodes
start (step 2) and ``htask status`` lists both live; the page's stop line stops the
server. Every wait polls with a bound.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from .conftest import wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "howto-several-nodes.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
AS_POSTGRES = "runuser -u postgres -- "


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def blocks(language: str) -> list[str]:
    return [m.group(2) for m in FENCE.finditer(PAGE.read_text()) if m.group(1) == language]


def try_it_commands(folder: str, port: int) -> list[str]:
    """The commands of "To try it on one machine", in order, for this user."""
    section = PAGE.read_text().split("### To try it on one machine", 1)[1]
    body = FENCE.search(section)
    assert body and body.group(1) == "console", "the section has no console block"
    commands = []
    for line in body.group(2).splitlines():
        assert line.startswith("$ "), f"a console line that is not a command: {line!r}"
        command = line[2:].replace("/tmp/pg", folder).replace("5433", str(port))
        if os.geteuid() != 0:  # what the page says to leave out as another user
            if command.startswith("chown "):
                continue
            command = command.replace(AS_POSTGRES, "")
        commands.append(command)
    return commands


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``args`` to the end (bounded), their output captured; the caller checks the exit."""
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=180, check=False
    )


def run_shell(commands: list[str], cwd: Path, env: dict[str, str]) -> dict[str, str]:
    """The commands in one shell (their variables carry over), stopping at the first
    that fails; ``python`` is this interpreter. The environment they exported, after."""
    script = "set -e\n"
    for command in commands:
        words = shlex.split(command)
        if words and words[0] == "python":
            script += shlex.quote(sys.executable) + command[len("python") :] + "\n"
        else:
            script += command + "\n"
    script += "echo; echo ENVIRONMENT; env -0\n"
    result = run(["bash", "-c", script], cwd, env)
    assert result.returncode == 0, (script, result.stdout, result.stderr)
    exported = result.stdout.rsplit("\nENVIRONMENT\n", 1)[1]
    return dict(pair.split("=", 1) for pair in exported.split("\0") if "=" in pair)


def test_the_settings_need_the_import_the_page_gives(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "django", "startproject", "mysite"], cwd=tmp_path, check=True
    )
    made = (tmp_path / "mysite" / "mysite" / "settings.py").read_text()
    settings = next(b for b in blocks("python") if b.startswith("# settings.py"))
    if not re.search(r"^import os\b", made, re.MULTILINE):  # startproject's of Django 5/6
        assert re.search(r"^import os\b", settings, re.MULTILINE)
    assert "os.environ" in settings


def test_two_nodes_on_the_pages_postgresql(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "django", "startproject", "mysite"], cwd=tmp_path, check=True
    )
    project = tmp_path / "mysite"
    settings = next(b for b in blocks("python") if b.startswith("# settings.py"))
    with (project / "mysite" / "settings.py").open("a") as f:
        f.write('\nINSTALLED_APPS += ["django_htask"]\n' + settings)
    folder = f"/tmp/htask-howto-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "HTASK_"))}
    env["PYTHONUNBUFFERED"] = "1"
    commands = try_it_commands(folder, free_port())
    nodes: list[subprocess.Popen[bytes]] = []
    try:
        exported = run_shell(commands, project, env)
        env.update({k: v for k, v in exported.items() if k.startswith("DB_")})
        assert {"DB_HOST", "DB_PORT", "DB_PASSWORD"} <= set(env), "the page exports them"
        for i in range(2):  # step 2: the same command wherever a node is wanted
            with (tmp_path / f"node-{i}.log").open("w") as log:
                nodes.append(
                    subprocess.Popen(
                        [sys.executable, "manage.py", "runscheduler"],
                        cwd=project,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )

        def status() -> str | None:
            result = run([sys.executable, "manage.py", "htask", "status"], project, env)
            return result.stdout if "nodes: 2 live" in result.stdout else None

        wait_until(status, 60.0, "htask status to list two live nodes")
        for node in nodes:
            node.send_signal(signal.SIGTERM)
        for i, node in enumerate(nodes):
            assert node.wait(30) == 0, (tmp_path / f"node-{i}.log").read_text()
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
        stop = next(
            c for c in re.findall(r"`([^`]*pg_ctl -D /tmp/pg/data stop)`", PAGE.read_text()) if c
        )
        if Path(folder, "data", "postmaster.pid").exists():
            prefix = AS_POSTGRES if os.geteuid() == 0 else ""
            pgbin = next(c for c in commands if c.startswith("PGBIN="))
            run_shell([pgbin, prefix + stop.replace("/tmp/pg", folder)], tmp_path, env)
        shutil.rmtree(folder, ignore_errors=True)
