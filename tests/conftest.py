"""Fixtures shared by the integration and acceptance tests."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

from django_htask.engine import FakeClock

if TYPE_CHECKING:
    from django_htask.decorators import BadDeclaration

START = datetime(2030, 1, 1, tzinfo=UTC)


def pass_vendor() -> str:
    """The database this pass runs on, as Django names its vendor: ``postgresql`` or
    ``mysql`` after ``HTASK_TEST_DATABASE_URL``'s scheme, ``sqlite`` without it."""
    url = os.environ.get("HTASK_TEST_DATABASE_URL", "")
    if not url:
        return "sqlite"
    return "mysql" if url.startswith(("mysql:", "mariadb:")) else "postgresql"


#: The markers of tests that need one database server: the pass they run in, and how
#: to run it.
SERVER_MARKERS = {
    "postgres": ("postgresql", "PostgreSQL", "tests.pgcluster"),
    "mariadb": ("mysql", "MariaDB", "tests.mariadbcluster"),
}


def server_marks(item: pytest.Item) -> list[str]:
    """The :data:`SERVER_MARKERS` ``item`` carries."""
    return [m for m in SERVER_MARKERS if item.get_closest_marker(m)]


def runs_elsewhere(item: pytest.Item) -> bool:
    """Whether ``item`` needs a server, and not the one of this pass."""
    marks = server_marks(item)
    return bool(marks) and pass_vendor() not in {SERVER_MARKERS[m][0] for m in marks}


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tests marked ``postgres`` run in the PostgreSQL pass (``python -m tests.pgcluster
    -- pytest``, the second run of ``make pytest``), those marked ``mariadb`` in the
    MariaDB pass (the third), those marked both in both. The other server's pass
    deselects them (:func:`pytest_collection_modifyitems`); elsewhere they are skipped,
    or fail when ``CI=true`` so a CI without the server cannot pass by skipping them."""
    if not runs_elsewhere(item):
        return
    marks = server_marks(item)
    servers = " or ".join(SERVER_MARKERS[m][1] for m in marks)
    commands = " or ".join(f"`python -m {SERVER_MARKERS[m][2]} -- pytest`" for m in marks)
    reason = f"needs {servers}: run it as {commands}"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason} (CI=true, so this is a failure, not a skip)")
    pytest.skip(reason)


#: Fixtures that give a test the test database (pytest-django's, and what uses them).
DATABASE_FIXTURES = frozenset(
    {
        "db",
        "transactional_db",
        "django_db_reset_sequences",
        "django_db_serialized_rollback",
        "live_server",
    }
)


def uses_test_database(item: pytest.Item) -> bool:
    """Whether a test reads or writes the test database (or a server of its own): a
    ``django_db``, ``postgres`` or ``mariadb`` mark, a database fixture, or a Django test case that
    has a database. The others — the engine's unit tests, the acceptance tests on
    SQLite files of their own, the browser tests of the example project — give the same
    result on every database."""
    if any(item.get_closest_marker(m) for m in ("django_db", *SERVER_MARKERS)):
        return True
    if DATABASE_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    from django.test import TransactionTestCase

    cls = getattr(item, "cls", None)
    return cls is not None and issubclass(cls, TransactionTestCase)


#: Tests that import no Django (the engine's and the cron vectors), the several-node
#: fault tests, and the one-node process faults (kill -9, a task taking its process
#: down, hung tasks stopped by signals): the compatibility passes on other Django
#: versions leave them out (they ran in the main pass, and the Django version changes
#: nothing in them; every other acceptance test starts manage.py on each version).
ONCE_ONLY = (
    "tests/unit/engine/",
    "tests/conformance/test_cron_conformance.py",
    "tests/cluster/",
    "tests/acceptance/test_faults.py",
    "tests/acceptance/test_stopping.py",
)


def _left_out(config: pytest.Config, item: pytest.Item) -> bool:
    """Whether this pass leaves ``item`` out (see :func:`pytest_collection_modifyitems`)."""
    if os.environ.get("HTASK_COMPAT"):
        path = item.path.relative_to(config.rootpath).as_posix()
        if path.startswith(ONCE_ONLY):
            return True
    if not os.environ.get("HTASK_TEST_DATABASE_URL"):
        return False
    if pass_vendor() == "mysql" and item.get_closest_marker("executor_variant"):
        return True  # the PostgreSQL pass runs it; the database's part is the same
    if runs_elsewhere(item):
        return True  # they test another server itself: its own pass runs them
    return not uses_test_database(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Captured output that UTF-8 cannot encode (a test that logs a lone surrogate on
    purpose) is kept escaped: pytest-xdist sends each report to the controller as UTF-8
    and would otherwise lose the worker."""
    report = yield
    report.sections = [
        (title, text.encode("utf-8", "backslashreplace").decode("utf-8"))
        for title, text in report.sections
    ]
    return report


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run each test in as few passes as gives all it can tell (``make test``):

    - the main PostgreSQL pass runs only the tests that use the database: the others
      ran in the SQLite pass and would give the same result; the MariaDB pass too;
      neither runs the tests marked for the other's server (``postgres``, ``mariadb``);
    - a compatibility pass (``HTASK_COMPAT=1``: another Django version, on one database)
      leaves out the tests that import no Django and the process-level fault tests
      (:data:`ONCE_ONLY`); on a database server it also runs only the tests that use
      the database, as the main server passes do (the compatibility pass on SQLite,
      Django 6.0, runs the others on Django 6)."""
    dropped = [item for item in items if _left_out(config, item)]
    if not dropped:
        return
    config.hook.pytest_deselected(items=dropped)
    items[:] = [item for item in items if not _left_out(config, item)]
    config.stash[_LEFT_OUT] = len(dropped)


_LEFT_OUT = pytest.StashKey[int]()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    dropped = config.stash.get(_LEFT_OUT, 0)
    if not dropped:
        return
    if os.environ.get("HTASK_COMPAT") and os.environ.get("HTASK_TEST_DATABASE_URL"):
        why = (
            "that import no Django, test process faults or use no database (the main "
            "pass and the compatibility pass on SQLite run them)"
        )
    elif os.environ.get("HTASK_COMPAT"):
        why = "that import no Django or test process faults (the main pass runs them)"
    elif pass_vendor() == "mysql":
        why = (
            "that use no database, need PostgreSQL or vary only what runs the task "
            "(executor_variant; the SQLite and PostgreSQL passes run them)"
        )
    else:
        why = "that use no database or need MariaDB (the SQLite and MariaDB passes run them)"
    terminalreporter.write_line(f"{dropped} tests {why} were deselected")


@pytest.fixture(autouse=True, scope="session")
def _no_exit_in_the_test_process() -> Iterator[None]:
    """``os._exit`` in the test process itself would end the run with its status, 0 say,
    and the tests not run yet would pass unseen: make it an error here (a child process
    started with fork keeps the real one)."""
    real, pid = os._exit, os.getpid()

    def guarded(code: int) -> None:
        if os.getpid() != pid:
            real(code)
        raise RuntimeError(f"os._exit({code}) was called in the test process")

    os._exit = guarded  # type: ignore[assignment]
    yield
    os._exit = real


@pytest.fixture(autouse=True)
def _htask_log_level() -> Iterator[None]:
    """Restore the ``django_htask`` logger's level and handlers: ``runscheduler`` run in
    the test process sets them (``--log-level``), and a later test in that process then
    captured INFO records (``node_started``) it does not expect."""
    logger = logging.getLogger("django_htask")
    level, handlers = logger.level, list(logger.handlers)
    yield
    logger.setLevel(level)
    logger.handlers[:] = handlers


@pytest.fixture(autouse=True)
def _close_thread_connections() -> Iterator[None]:
    """Close the PostgreSQL connections other threads (a node's) opened during the test:
    the server cannot drop the test database while they are open, and psycopg warns
    when one is garbage-collected open."""
    from django.db.backends.signals import connection_created

    opened: list[Any] = []

    def created(sender: object, connection: Any, **kwargs: object) -> None:
        if connection.vendor == "postgresql" and threading.current_thread() is not (
            threading.main_thread()
        ):
            opened.append(connection)

    connection_created.connect(created, weak=False)
    yield
    connection_created.disconnect(created)
    for wrapper in opened:
        if wrapper.connection is not None:
            with contextlib.suppress(Exception):
                wrapper.connection.close()
            # A thread that outlives the test (asgiref's one thread for sync code, shared
            # by every async test) connects again at its next query.
            wrapper.connection = None


@pytest.fixture
def fake_clock() -> Iterator[FakeClock]:
    """A FakeClock at 2030-01-01T00:00Z that the Django layer reads too."""
    from django_htask.clock import use_clock

    clock = FakeClock(START)
    with use_clock(clock):
        yield clock


@pytest.fixture
def make_node(fake_clock: FakeClock) -> Iterator[Callable[..., Any]]:
    """Start nodes on the fake clock; every node started is stopped at the end."""
    from django_htask.node import Node

    nodes: list[Node] = []

    def make(start: bool = True, sync: Any = None, **kwargs: Any) -> Node:
        kwargs.setdefault("workers", 2)
        kwargs.setdefault("poll_interval", 1.0)
        kwargs.setdefault("node_id", f"test-node-{len(nodes) + 1}")
        node = Node(clock=fake_clock, **kwargs)
        nodes.append(node)
        if start:
            node.start(sync=sync)
            fake_clock.advance(0)
        return node

    yield make
    for node in nodes:
        node.stop(timeout=5)


@pytest.fixture
def declared() -> Iterator[None]:
    """Restore the declared schedules, and the declarations that could not be read,
    after a test declares more."""
    from django_htask import code_schedules

    with code_schedules._lock:
        before, bad = dict(code_schedules._declared), dict(code_schedules._bad)
    yield
    with code_schedules._lock:
        code_schedules._declared.clear()
        code_schedules._declared.update(before)
        code_schedules._bad.clear()
        code_schedules._bad.update(bad)


def refused(declare: Callable[[], object]) -> BadDeclaration:
    """The one declaration that ``declare()`` makes, recorded by ``@periodic`` as
    unreadable (not raised); taken out of the record."""
    from django_htask import code_schedules

    before = set(code_schedules._bad)
    declare()
    with code_schedules._lock:
        made = [key for key in code_schedules._bad if key not in before]
        assert len(made) == 1, f"expected one bad declaration, got {made}"
        return code_schedules._bad.pop(made[0])


@pytest.fixture
def calls() -> Iterator[Any]:
    """The test app's record of calls, emptied before and after."""
    from tests.integration.testapp import tasks

    tasks.calls.clear()
    tasks.gate.clear()
    yield tasks.calls
    tasks.gate.set()
    tasks.calls.clear()
