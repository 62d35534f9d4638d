"""The example project's own tests pass, run as its users run them
(``python manage.py test example``): they use the eager mode, the fake clock and the
assertions of django_htask.testing (docs/testing.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MANAGE = ROOT / "example_project" / "manage.py"


def test_the_example_projects_tests_pass(tmp_path: Path) -> None:
    env = {**os.environ, "HTASK_EXAMPLE_DB": str(tmp_path / "example.sqlite3")}
    for name in ("DJANGO_SETTINGS_MODULE", "HTASK_TEST_DATABASE_URL"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, str(MANAGE), "test", "example", "-v", "2"],
        cwd=MANAGE.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Ran 4 tests" in done.stderr
    assert "test_a_reminder_fires_when_it_is_due" in done.stderr
    assert "\nOK\n" in done.stderr
