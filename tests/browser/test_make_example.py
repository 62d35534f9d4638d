"""``make example``'s script: it migrates, creates the demo user, starts the web server
and the scheduler, prints where to sign in, and stops both on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from .example_site import ROOT, free_port

pytestmark = pytest.mark.slow


def test_run_py_starts_the_site_and_the_scheduler_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    env = {
        **os.environ,
        "HTASK_EXAMPLE_DB": str(tmp_path / "db.sqlite3"),
        "HTASK_EXAMPLE_ADDRESS": address,
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "example_project" / "run.py")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    lines: list[str] = []
    ready = threading.Event()
    scheduling = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            lines.append(raw.decode(errors="replace"))
            if "sign in as" in lines[-1]:
                ready.set()
            if lines[-1].startswith("  node:"):
                scheduling.set()  # runscheduler's banner

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert ready.wait(90), "".join(lines)
        banner = "".join(lines)
        assert f"open http://{address}/ and sign in as demo / demo" in banner
        assert "created the superuser 'demo'" in banner
        with urllib.request.urlopen(f"http://{address}/accounts/login/", timeout=10) as page:
            assert page.status == 200
            assert b"Sign in" in page.read()
        assert scheduling.wait(60), "".join(lines)
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        reader.join(5)
        assert process.stdout is not None
        process.stdout.close()
    output = "".join(lines)
    assert "stopping" in output
    assert output.rstrip().endswith("stopped.")  # the scheduler was the last to stop
