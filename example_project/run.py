"""Quick start (``make example``): migrate, create the demo user, run the site and the
scheduler.

Migrates the SQLite database, creates the demo superuser (demo / demo) and the
admin-defined example schedule (``manage.py setup_demo``), then starts
``manage.py runscheduler`` and ``manage.py runserver`` side by side, prints where to
sign in, and stops both cleanly on Ctrl-C (the scheduler gets SIGTERM and finishes
its running jobs).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ADDRESS = os.environ.get("HTASK_EXAMPLE_ADDRESS", "127.0.0.1:8000")


def manage(*args: str) -> list[str]:
    return [sys.executable, str(HERE / "manage.py"), *args]


def stop(process: subprocess.Popen[bytes], timeout: float = 35.0) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wait_until_serving(server: subprocess.Popen[bytes], timeout: float = 60.0) -> bool:
    """Wait for the web server to answer (False if it exited or did not answer)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with urllib.request.urlopen(f"http://{ADDRESS}/accounts/login/", timeout=2):
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            time.sleep(0.2)
    return False


def main() -> int:
    subprocess.run(manage("migrate", "--no-input", "-v", "0"), check=True)
    subprocess.run(manage("setup_demo"), check=True)
    # Own process groups: Ctrl-C reaches this script only, which stops both in order.
    scheduler = subprocess.Popen(manage("runscheduler"), start_new_session=True)
    server = subprocess.Popen(manage("runserver", ADDRESS, "--noreload"), start_new_session=True)
    if not wait_until_serving(server):
        print(f"the web server did not start on {ADDRESS}", file=sys.stderr, flush=True)
        stop(server, timeout=10)
        stop(scheduler)
        return 1
    user = os.environ.get("HTASK_EXAMPLE_USER", "demo")
    password = os.environ.get("HTASK_EXAMPLE_PASSWORD", "demo")
    print(
        f"\ndjango-htask example: open http://{ADDRESS}/ and sign in as {user} / {password}"
        f"\n  the admin: http://{ADDRESS}/admin/  (Ctrl-C stops both processes)\n",
        flush=True,
    )
    code = 0
    try:
        while scheduler.poll() is None and server.poll() is None:
            time.sleep(0.5)
        code = 1  # one of them died on its own
    except KeyboardInterrupt:
        print("\nstopping…", flush=True)
    finally:
        stop(server, timeout=10)
        stop(scheduler)
    return code


if __name__ == "__main__":
    sys.exit(main())
