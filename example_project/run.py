"""Quick start (``make example``): set up the example database and run the example site."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ADDRESS = os.environ.get("HTASK_EXAMPLE_ADDRESS", "127.0.0.1:8000")


def manage(*args: str) -> None:
    subprocess.run([sys.executable, str(HERE / "manage.py"), *args], check=True)


def main() -> None:
    manage("migrate", "--no-input", "-v", "0")
    print(f"\ndjango-htask example: open http://{ADDRESS}/  (Ctrl-C to stop)\n", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        manage("runserver", ADDRESS, "--noreload")


if __name__ == "__main__":
    main()
