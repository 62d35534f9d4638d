"""The engine never imports Django: it works with no settings configured."""

from __future__ import annotations

import subprocess
import sys


def test_engine_imports_without_django() -> None:
    code = (
        "import importlib, pkgutil, sys, django_htask.engine as e\n"
        "for m in pkgutil.iter_modules(e.__path__):\n"
        "    importlib.import_module('django_htask.engine.' + m.name)\n"
        "bad = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.'))\n"
        "assert not bad, bad\n"
        "with e.Scheduler(workers=1, clock=e.FakeClock()) as s:\n"
        "    s.call_later(1, print)\n"
        "print('clean')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "clean"
