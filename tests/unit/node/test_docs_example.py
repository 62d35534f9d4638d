"""docs/testing.md's example runs as written there."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[3] / "docs" / "testing.md"


def test_the_in_memory_store_example_runs_as_written() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)
    [code] = [block for block in blocks if "InMemoryStore(clock)" in block]
    import tests.integration.testapp.tasks  # noqa: F401  (registers add and boom)

    exec(compile(code, str(DOC), "exec"), {})
