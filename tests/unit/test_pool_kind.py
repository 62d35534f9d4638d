"""The node and its supervisor do not ask where a call runs: they use the executor
interface (``node/executors.py``), and the node's setting ``pool`` is read once, where
the node chooses its executor. Read from the source (the AST), so it needs nothing
running."""

from __future__ import annotations

import ast
from pathlib import Path

import django_htask

NODE = Path(django_htask.__file__).resolve().parent / "node"
#: The pools themselves, and what they exchange: they are where the kind lives.
POOLS = {"executors.py", "processes.py", "child.py", "messages.py"}
#: The names of the pools and executors, which an ``isinstance`` would branch on.
KINDS = {"ProcessPool", "ProcessExecutor", "ThreadExecutor", "WorkerPool", "Executor"}


def _kind_questions(source: str) -> list[str]:
    """Each comparison of a pool or its setting, each ``isinstance`` against a pool or
    executor class, and each read of a node's ``processes``, as source text."""
    tree = ast.parse(source)
    found: list[str] = []
    counted: set[int] = set()  # the nodes inside a question found already
    for node in ast.walk(tree):
        if id(node) in counted:
            continue
        if _asks_kind(node):
            found.append(ast.unparse(node))
            counted |= {id(inner) for inner in ast.walk(node)}
    return found


def _asks_kind(node: ast.AST) -> bool:
    if isinstance(node, ast.Compare):
        return any(
            (isinstance(o, ast.Attribute) and o.attr in {"pool", "processes"})
            or (isinstance(o, ast.Constant) and o.value in {"process", "thread"})
            for o in [node.left, *node.comparators]
        )
    if isinstance(node, ast.Call):
        return (
            isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and bool(KINDS & {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)})
        )
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "processes"
        and (isinstance(node.ctx, ast.Load))
    )


def test_only_the_node_s_choice_of_executor_asks_the_pool_kind() -> None:
    asked = {
        path.name: questions
        for path in sorted(NODE.glob("*.py"))
        if path.name not in POOLS and (questions := sorted(_kind_questions(path.read_text())))
    }
    # The setting checked, the executor chosen, and the processes handed to it.
    expected = ["pool != settings.pool", "self.processes", "settings.pool == 'process'"]
    assert asked == {"node.py": expected}


def test_the_scan_finds_the_branches_it_forbids() -> None:
    source = (
        "if self.processes is not None:\n    pass\n"
        "if isinstance(executor, ProcessExecutor):\n    pass\n"
        "if settings.pool == 'thread':\n    pass\n"
        "pool = node.processes\n"
    )
    assert _kind_questions(source) == [
        "self.processes is not None",
        "isinstance(executor, ProcessExecutor)",
        "settings.pool == 'thread'",
        "node.processes",
    ]
