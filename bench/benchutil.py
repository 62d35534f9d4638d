"""Helpers shared by the benchmarks (run as ``python bench/<name>.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def rss_bytes() -> int:
    """This process's resident set size, from /proc (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_in_child(script: str, impl: str, n: int, timeout: float = 900) -> dict[str, float]:
    """Run ``script --memory-child IMPL N`` in a fresh interpreter, so that one
    measurement's garbage cannot inflate the next, and return the JSON it prints."""
    out = subprocess.run(
        [sys.executable, script, "--memory-child", impl, str(n)],
        capture_output=True,
        text=True,
        check=True,
        timeout=timeout,
    )
    result: dict[str, float] = json.loads(out.stdout)
    return result


def compile_sources(root: str | os.PathLike[str], python: str = sys.executable) -> None:
    """Byte-compile the project's own modules under ``root`` for ``python``, as pip does
    for an installed package: with ``PYTHONDONTWRITEBYTECODE`` set (this machine sets it)
    and an editable install, every process the benchmark starts would otherwise compile
    them from source again, a cost of start-up that neither an installed django-htask
    nor the peers' installed packages pay."""
    subprocess.run(
        [python, "-m", "compileall", "-q", "django_htask", "tests", "bench"],
        cwd=root,
        check=True,
        stdout=subprocess.DEVNULL,
    )
