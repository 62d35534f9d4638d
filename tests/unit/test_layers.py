"""django_htask's modules import each other in one direction only: no loops, at module
level or inside functions (``TYPE_CHECKING`` blocks included), and the layers hold.

Layers, bottom up: the engine; leaf modules (the version, settings, signals, clock,
change notices, errors, enums, keys, flow, queues, partition, retry, due times);
models; the store; the node; and on top what users call and the surface (api,
scheduled, decorators, functions, code_schedules, admin, commands, backends, checks,
operations), the package root among them (it re-exports what users call). A module
only imports downward.

No module of the node imports ``django`` or a ``django.*`` module: it talks to the
database through its store only (which turns the database's errors into
``StoreUnavailable``), so the in-memory store can show it everything a database does,
an outage included.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import django_htask

ROOT = Path(django_htask.__file__).resolve().parent
PACKAGE = "django_htask"


def _module_name(path: Path) -> str:
    parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in ROOT.rglob("*.py") if "migrations" not in p.parts}


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(module: str) -> Iterator[str]:
    """The django_htask modules ``module`` imports, wherever the import statement is."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node, path.name == "__init__.py")
            names = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
            names = names or [target]
        else:
            continue
        for imported in names:
            name = imported
            while name and name not in MODULES:  # `import a.b.c` imports the module a.b.c
                name = name.rpartition(".")[0]
            if name.startswith(PACKAGE) and name != module:
                yield name


GRAPH = {module: set(imports_of(module)) for module in MODULES}


def _cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    return found


def test_no_module_imports_itself_back_through_others() -> None:
    assert _cycles() == []


#: The package root's name in :data:`LAYERS`.
ROOT_MODULE = "__init__"


def _layer(module: str) -> int:
    short = ROOT_MODULE if module == PACKAGE else module.removeprefix(PACKAGE + ".")
    for level, prefixes in enumerate(LAYERS):
        if any(short == p or short.startswith(p + ".") for p in prefixes):
            return level
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


LAYERS = [
    ("engine",),
    (
        "_version",
        "conf",
        "db",
        "signals",
        "clock",
        "notices",
        "exceptions",
        "enums",
        "keys",
        "flow",
        "queues",
        "partition",
        "retry",
        "retention",
        "due",
        "graph",
        "current",
    ),
    ("models", "querysets"),
    ("store",),
    ("node",),
    (
        "api",
        "scheduled",
        "progress",
        "decorators",
        "functions",
        "code_schedules",
        "admin",
        "admin_database",
        "management",
        "backends",
        "checks",
        "operations",
        "queue_control",
        "apps",
        "tasks",
        "testing",
        "eager",
        "pytest_plugin",
        "health",
        "metrics",
        "views",
        "urls",
        "overview",
        "celery_beat",
        "compose",
        ROOT_MODULE,
        "routers",
    ),
]


def test_every_module_imports_only_its_own_layer_or_below() -> None:
    upward = [
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        for target in targets
        if _layer(target) > _layer(module)
    ]
    assert upward == []


def test_the_package_root_is_on_top_so_nothing_below_may_import_it() -> None:
    # (The test above then fails on node/node.py importing the root for __version__.)
    assert _layer(PACKAGE) == len(LAYERS) - 1
    assert GRAPH.get(PACKAGE)  # its imports are walked as any module's


def django_imports(module: str) -> Iterator[str]:
    """The modules of Django ``module`` imports, wherever the import statement is."""
    path = MODULES[module]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        yield from (name for name in names if name == "django" or name.startswith("django."))


def test_the_node_imports_no_django() -> None:
    node = sorted(m for m in MODULES if m == f"{PACKAGE}.node" or m.startswith(f"{PACKAGE}.node."))
    assert len(node) > 10
    assert {m: list(django_imports(m)) for m in node if list(django_imports(m))} == {}


def test_the_django_import_finder_finds_them() -> None:  # the test above can fail
    assert set(django_imports(f"{PACKAGE}.store.database.core")) >= {"django.db"}


def test_what_users_call_never_loads_the_node() -> None:
    for module in ("api", "decorators", "models", "backends"):
        reached = set()
        todo = [f"{PACKAGE}.{module}"]
        while todo:
            current = todo.pop()
            for target in GRAPH[current]:
                if target not in reached:
                    reached.add(target)
                    todo.append(target)
        assert not {m for m in reached if m.startswith(f"{PACKAGE}.node")}, module


def test_the_layers_name_every_module_and_only_modules() -> None:
    named = {name for layer in LAYERS for name in layer}
    tops = {m.removeprefix(f"{PACKAGE}.").split(".")[0] for m in MODULES if m != PACKAGE}
    tops.add(ROOT_MODULE)
    assert named == tops
