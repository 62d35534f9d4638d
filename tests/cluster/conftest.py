"""Fixtures for the multi-node tests on PostgreSQL: other clients of the server, and
the site of the tests with real ``runscheduler`` processes (``site``); on MariaDB, the
same site (``mariadb_site``)."""

from __future__ import annotations

import os
import signal
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.acceptance.conftest import Scheduler
from tests.cluster.site import ClusterSite, MariaDBSite

SETTINGS = "tests.cluster.settings"
TABLES = (
    "django_htask_run, django_htask_task, django_htask_schedule, django_htask_node, "
    "django_htask_queue, django_htask_rateslot"
)


def connect(autocommit: bool = True) -> Any:
    """A new psycopg connection to the test database (another client of the server)."""
    import psycopg

    from django_htask.store.listen import connection_params

    return psycopg.connect(**connection_params(), autocommit=autocommit)


@pytest.fixture
def other_client() -> Iterator[Callable[..., Any]]:
    """Open psycopg connections of another client; all closed at the end."""
    opened: list[Any] = []

    def open_(autocommit: bool = True) -> Any:
        conn = connect(autocommit)
        opened.append(conn)
        return conn

    yield open_
    for conn in opened:
        conn.close()


@pytest.fixture
def listen(other_client: Callable[..., Any]) -> Callable[[float], list[str]]:
    """LISTEN on the store's channel; ``listen(timeout)`` returns the payloads received
    so far (waiting up to ``timeout`` seconds for the first one)."""
    from django_htask.store.postgres import CHANNEL

    conn = other_client()
    conn.execute(f"LISTEN {CHANNEL}")

    def received(timeout: float = 0.5) -> list[str]:
        payloads = [n.payload for n in conn.notifies(timeout=timeout, stop_after=1)]
        payloads += [n.payload for n in conn.notifies(timeout=0.05)]
        return payloads

    return received


class Site(ClusterSite):
    def __init__(self, url: str, log: Path) -> None:
        super().__init__(SimpleNamespace(url=url), log, SETTINGS)  # type: ignore[arg-type]
        self.started: list[Scheduler] = []

    def spawn(self, *args: str, **env: str) -> Scheduler:
        """A ``runscheduler`` process, just started (it may die before its banner)."""
        scheduler = Scheduler(Path("unused"), list(args), {**self.env, **env})
        self.started.append(scheduler)
        return scheduler

    def node(self, *args: str, **env: str) -> Scheduler:
        """A ``runscheduler`` process, once it printed its banner."""
        scheduler = self.spawn(*args, **env)
        scheduler.wait_ready(60)
        return scheduler

    def lines(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [line.split() for line in self.log.read_text().splitlines()]

    def schedule(self, name: str, spec: str, function: str, *args: Any, **fields: Any) -> int:
        out = self.django(
            "from django_htask.models import Schedule\n"
            f"s = Schedule(name={name!r}, function={function!r}, schedule={spec!r}, **{fields!r})\n"
            f"s.set_call({args!r})\n"
            "s.save()\n"
            "print(s.pk)\n"
        )
        return int(out)


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    """A database of the module's own on the suite's server, migrated once (the
    fault tests' ``htask_faults``, made afresh for each module that uses it)."""
    import psycopg

    server = os.environ["HTASK_TEST_DATABASE_URL"]
    parts = urllib.parse.urlsplit(server)
    url = urllib.parse.urlunsplit(parts._replace(path="/htask_faults"))
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS htask_faults WITH (FORCE)")
        conn.execute("CREATE DATABASE htask_faults")
    site = ClusterSite(SimpleNamespace(url=url), Path("unused"), SETTINGS)  # type: ignore[arg-type]
    site.django(
        "from django.core.management import call_command\ncall_command('migrate', verbosity=0)"
    )
    yield url
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS htask_faults WITH (FORCE)")


@pytest.fixture
def site(database: str, tmp_path: Path) -> Iterator[Site]:
    site = Site(database, tmp_path / "jobs.log")
    site.sql(f"TRUNCATE {TABLES}")
    yield site
    _kill_nodes(site)


def _kill_nodes(site: Site) -> None:
    for node in site.started:
        if node.process.poll() is None:
            node.process.send_signal(signal.SIGCONT)
        node.kill()


class MariaDBNodesSite(Site, MariaDBSite):
    """The site on MariaDB: SQL through mysqlclient, and nodes polling every 0.5 s
    (there is no NOTIFY to tell them of new tasks or a lock freed; at PostgreSQL's 5 s
    one node would run every task of a lock alone)."""

    #: The nodes' ``POLL_INTERVAL``: they hear of an edit at their next poll.
    HEARD_WITHIN = 0.5

    def __init__(self, url: str, log: Path) -> None:
        super().__init__(url, log)
        self.env["HTASK_CLUSTER_POLL"] = str(self.HEARD_WITHIN)


#: The database of the multi-node tests on the MariaDB pass's server.
MARIADB_DATABASE = "htask_nodes"


def _mariadb_server(statement: str) -> None:
    """Run ``statement`` on the MariaDB pass's server, outside any database."""
    from tests.mariadbcluster import connect, database_settings

    conn = connect(database_settings(os.environ["HTASK_TEST_DATABASE_URL"]), database=False)
    try:
        conn.cursor().execute(statement)
    finally:
        conn.close()


@pytest.fixture(scope="module")
def mariadb_database() -> Iterator[str]:
    """:data:`MARIADB_DATABASE` on the suite's MariaDB server, made afresh and migrated
    once for each module that uses it."""
    server = os.environ["HTASK_TEST_DATABASE_URL"]
    url = server.rsplit("/", 1)[0] + f"/{MARIADB_DATABASE}"
    _mariadb_server(f"DROP DATABASE IF EXISTS {MARIADB_DATABASE}")
    _mariadb_server(
        f"CREATE DATABASE {MARIADB_DATABASE} CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
    )
    site = MariaDBSite(SimpleNamespace(url=url), Path("unused"), SETTINGS)  # type: ignore[arg-type]
    site.django(
        "from django.core.management import call_command\ncall_command('migrate', verbosity=0)"
    )
    yield url
    _mariadb_server(f"DROP DATABASE IF EXISTS {MARIADB_DATABASE}")


@pytest.fixture
def mariadb_site(mariadb_database: str, tmp_path: Path) -> Iterator[MariaDBNodesSite]:
    site = MariaDBNodesSite(mariadb_database, tmp_path / "jobs.log")
    for table in TABLES.split(", "):  # one table a statement, the referencing ones first
        site.sql(f"DELETE FROM {table}")
    yield site
    _kill_nodes(site)
