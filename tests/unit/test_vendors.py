"""A database's SQL and name live in that database's modules: no other module of
django_htask names a vendor, reads a connection's ``vendor``, writes SQL that only some
databases speak, reads a database's error text or imports a database driver. The code
the databases share asks capabilities instead: the store and its dialect
(``store/dialect.py``), or ``connection.features``.

Read from the source (the AST's string constants, docstrings left out, attribute reads
and imports), so it needs no database.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import django_htask

ROOT = Path(django_htask.__file__).resolve().parent

#: Where vendor names and SQL belong: a file, or a function of it, and why.
ALLOWED = {
    "store/sqlite.py": "SQLite's module",
    "store/postgres.py": "PostgreSQL's module",
    "store/pg_triggers.py": "PostgreSQL's module: its triggers' text",
    "store/listen.py": "PostgreSQL's module: its LISTEN thread",
    "store/mysql.py": "MySQL's and MariaDB's module",
    "store/__init__.py:get_store": "the dispatch: a vendor's store",
    "migrations/": "migrations keep the text they were applied with, and branch on their "
    "schema editor's connection as Django's own do",
}

#: A string that is a vendor's name.
VENDOR = re.compile(r"\s*(postgres|postgresql|mysql|mariadb|sqlite|sqlite3|oracle)\s*", re.I)
#: SQL only some databases speak, and their error texts.
VENDOR_SQL = re.compile(
    r"ON CONFLICT|ON DUPLICATE KEY|EXCLUDED\.|\bVALUES\(|INDEXED BY|FORCE INDEX|USE INDEX"
    r"|STRAIGHT_JOIN|LOCK IN SHARE MODE|\bFOR SHARE\b|\bNOTIFY\b|\bLISTEN\b|INSERT OR "
    r"|::\w|\bILIKE\b|sqlite_master|(?i:\b(?:unnest|pg_\w+|last_insert_id|get_lock"
    r"|release_lock|is_used_lock|julianday|unhex|sha1)\s*\()"
    r"|no such table|doesn't exist|relation \""
)
#: The database drivers.
DRIVERS = {"psycopg", "psycopg2", "MySQLdb", "pymysql", "mysql", "sqlite3", "oracledb"}


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are documentation (a module's, a class's,
    a function's, and an attribute's)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


def findings(source: str) -> Iterator[tuple[str, int, str]]:
    """``(function, line, what)`` for each vendor name, vendor SQL, read of a
    ``vendor`` other than a store's own (``self.vendor``) and driver import of
    ``source``; ``function``: the top-level function or class it is in ('' if none)."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    for top in ast.iter_child_nodes(tree):
        where = top.name if isinstance(top, ast.FunctionDef | ast.ClassDef) else ""
        for node in ast.walk(top):
            what = _what(node, docs)
            if what:
                yield where, getattr(node, "lineno", 0), what


def _what(node: ast.AST, docs: set[int]) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
        if VENDOR.fullmatch(node.value) or VENDOR_SQL.search(node.value):
            return repr(node.value[:60])
    elif isinstance(node, ast.Attribute) and node.attr == "vendor":
        if isinstance(node.ctx, ast.Load) and not (
            isinstance(node.value, ast.Name) and node.value.id == "self"
        ):
            return f"{ast.unparse(node)} read"
    elif isinstance(node, ast.Import | ast.ImportFrom):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
        for name in names:
            if name and name.split(".")[0] in DRIVERS:
                return f"import {name}"
    return ""


def _allowed(path: str, function: str) -> str | None:
    """The entry of :data:`ALLOWED` that lets ``function`` of ``path`` name vendors."""
    for entry in (path, f"{path}:{function}"):
        if entry in ALLOWED:
            return entry
    return next((entry for entry in ALLOWED if path.startswith(entry.rstrip("/") + "/")), None)


@functools.cache
def _scan() -> tuple[list[str], set[str]]:
    """What is found outside :data:`ALLOWED`, and the entries that allowed something."""
    outside: list[str] = []
    used: set[str] = set()
    for file in sorted(ROOT.rglob("*.py")):
        path = file.relative_to(ROOT).as_posix()
        for function, line, what in findings(file.read_text()):
            entry = _allowed(path, function)
            if entry is None:
                outside.append(f"django_htask/{path}:{line} ({function or 'module'}): {what}")
            else:
                used.add(entry)
    return outside, used


def test_no_vendor_name_or_sql_outside_the_vendor_modules() -> None:
    outside, _used = _scan()
    assert outside == [], "move each into its vendor's module, behind the store or its dialect"


def test_every_entry_of_the_allow_list_is_needed() -> None:
    _outside, used = _scan()
    assert sorted(set(ALLOWED) - used) == []


def test_the_scan_finds_each_kind() -> None:
    source = '''
"""A docstring may say ON CONFLICT, and name PostgreSQL."""
import psycopg

def insert(connection, qn):
    if connection.vendor == "mysql":
        return f" ON DUPLICATE KEY UPDATE {qn('id')} = LAST_INSERT_ID({qn('id')})"
    return "SELECT count(pg_advisory_xact_lock(k)) FROM unnest(%s::bigint[]) AS k"

class Store:
    vendor = "sqlite"
    def describe(self):
        return self.vendor
'''
    assert {(function, what) for function, _line, what in findings(source)} == {
        ("", "import psycopg"),
        ("insert", "'mysql'"),
        ("insert", "connection.vendor read"),
        ("insert", "' ON DUPLICATE KEY UPDATE '"),
        ("insert", "' = LAST_INSERT_ID('"),
        ("insert", "'SELECT count(pg_advisory_xact_lock(k)) FROM unnest(%s::bigin'"),
        ("Store", "'sqlite'"),
    }


#: The stores of the vendor modules, and where the code they share is.
VENDOR_STORES = ("store/sqlite.py", "store/postgres.py", "store/mysql.py")
SHARED = ("store/database", "store/base.py")


def _class_names(tree: ast.AST, keep: Callable[[ast.ClassDef], bool]) -> dict[str, set[str]]:
    """The names each class of ``tree`` that ``keep`` keeps defines in its body (its
    methods and attributes)."""
    found: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and keep(node):
            names = found.setdefault(node.name, set())
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(item.name)
                elif isinstance(item, ast.Assign):
                    names |= {t.id for t in item.targets if isinstance(t, ast.Name)}
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_overrides(vendor_source: str, shared_sources: list[str]) -> list[str]:
    """``Class.name`` for each private name a store class of ``vendor_source`` (one
    based on ``DatabaseStore``) defines that a class of the shared code defines too."""
    shared: set[str] = set()
    for source in shared_sources:
        for names in _class_names(ast.parse(source), lambda _node: True).values():
            shared |= {name for name in names if _private(name)}

    def is_store(node: ast.ClassDef) -> bool:
        return any(ast.unparse(base).endswith("DatabaseStore") for base in node.bases)

    stores = _class_names(ast.parse(vendor_source), is_store)
    return sorted(f"{cls}.{name}" for cls, names in stores.items() for name in names & shared)


def test_a_vendor_store_overrides_nothing_private_of_the_shared_store() -> None:
    """What a database does its own way below the public ``Store`` interface is its
    dialect's, which the shared code calls explicitly: a vendor's store class may
    implement public methods, never replace a private step of the shared code."""
    shared = [
        file.read_text()
        for entry in SHARED
        for file in ([ROOT / entry] if entry.endswith(".py") else (ROOT / entry).rglob("*.py"))
    ]
    found = {path: private_overrides((ROOT / path).read_text(), shared) for path in VENDOR_STORES}
    assert found == {path: [] for path in VENDOR_STORES}


def test_the_override_scan_finds_a_private_step_replaced() -> None:
    shared = (
        "class TaskRows:\n    _by_id = ''\n    def _start_in(self): ...\n    def record(self): ..."
    )
    vendor = (
        "class Store(SharedReaper, DatabaseStore):\n"
        "    _by_id = ' FORCE INDEX (x)'\n"
        "    def _start_in(self): ...\n"
        "    def record(self): ...\n"
        "    def _own_helper(self): ...\n"
        "class MyDialect(Dialect):\n"
        "    def _start_in(self): ...\n"
    )
    assert private_overrides(vendor, [shared]) == ["Store._by_id", "Store._start_in"]
