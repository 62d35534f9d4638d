"""A throw-away MariaDB server for the tests: ``mariadb-install-db`` in a temporary
directory, a private socket, a free port on 127.0.0.1, removed when done.

As a command, it runs another command with ``HTASK_TEST_DATABASE_URL`` pointing at a
fresh server::

    python -m tests.mariadbcluster -- pytest tests/contract tests/integration

As a library::

    with MariaDBServer() as db:
        db.url            # mysql://root@127.0.0.1:PORT/htask
        db.restart()

The binaries (``mariadbd``, ``mariadb-install-db``, ``mariadb``) are looked up in
``$MARIADB_BIN``, then ``/usr/sbin`` and ``/usr/bin``, then ``$PATH``: Debian's
``mariadb-server`` package (``make system-deps`` installs it). No system service is
used. When the tests run as root the server runs as the ``mysql`` system user (as
tests/pgcluster.py runs PostgreSQL as ``postgres``). ``root`` connects without a
password, over TCP from 127.0.0.1 and over the socket.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.throwaway import ThrowAwayServer, free_port, run_command, url_settings

__all__ = ["MariaDBServer", "MariaDBUnavailable", "connect", "database_settings", "find_binary"]

#: Seconds the server has to answer after it is started, or to end after a shutdown.
START_TIMEOUT = 60.0
#: The server's character set: all of Unicode, as PostgreSQL's UTF8.
CHARSET = "utf8mb4"
COLLATION = "utf8mb4_unicode_ci"


class MariaDBUnavailable(RuntimeError):
    """The MariaDB server binaries cannot be found or the server does not start."""


def database_settings(url: str) -> dict[str, Any]:
    """A Django ``DATABASES`` entry for ``mysql://user[:password]@host[:port]/name``."""
    settings = url_settings(url, "django.db.backends.mysql", ("mariadb", "mysql"))
    return {
        **settings,
        "OPTIONS": {"charset": CHARSET},
        "TEST": {"CHARSET": CHARSET, "COLLATION": COLLATION},
    }


def connect(settings: dict[str, Any], *, database: bool = True, autocommit: bool = True) -> Any:
    """A mysqlclient connection, another client than Django's, to the server of the
    ``DATABASES`` entry ``settings`` (to its database unless ``database`` is False)."""
    import MySQLdb  # only in the MariaDB pass: mysqlclient may be missing elsewhere

    return MySQLdb.connect(
        host=settings["HOST"],
        port=int(settings["PORT"]),
        user=settings["USER"],
        password=settings["PASSWORD"],
        autocommit=autocommit,
        **({"database": settings["NAME"]} if database else {}),
    )


def find_binary(name: str) -> Path:
    """The MariaDB program ``name`` (see the module for where it is looked up)."""
    dirs = [os.environ["MARIADB_BIN"]] if os.environ.get("MARIADB_BIN") else []
    dirs += ["/usr/sbin", "/usr/bin"]
    for directory in dirs:
        path = Path(directory) / name
        if path.exists():
            return path
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path)
    raise MariaDBUnavailable(
        f"the MariaDB program {name!r} was not found (looked in {', '.join(dirs)} and $PATH): "
        "install the mariadb-server package (`make system-deps`) or set MARIADB_BIN"
    )


class MariaDBServer(ThrowAwayServer):
    """One MariaDB server in a temporary directory, for one test run."""

    unavailable = MariaDBUnavailable

    def __init__(self, database: str = "htask", port: int | None = None) -> None:
        self.server = find_binary("mariadbd")
        self.install_db = find_binary("mariadb-install-db")
        self.client = find_binary("mariadb")
        self.database = database
        self.port = port or free_port()
        self.root = Path(tempfile.mkdtemp(prefix="htask-mariadb-"))
        self.data_dir = self.root / "data"
        self.socket = self.root / "mariadb.sock"
        self.log_file = self.root / "server.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._user: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            try:
                self._user = pwd.getpwnam("mysql")
            except KeyError as exc:
                raise MariaDBUnavailable(
                    "running as root, and there is no 'mysql' system user to run the server as"
                ) from exc

    # -- properties ------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/{self.database}"

    def settings(self) -> dict[str, Any]:
        """A Django ``DATABASES`` entry for this server."""
        return database_settings(self.url)

    def version(self) -> str:
        """The server's version, as it reports it (``10.11.6-MariaDB-0+deb12u1``)."""
        return self.sql("SELECT VERSION()").strip()

    # -- running things as the server's user -------------------------------------------
    def _as_server_user(self) -> dict[str, Any]:
        if self._user is None:
            return {}
        return {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}

    def sql(self, statements: str) -> str:
        """Run ``statements`` as root over the private socket; return what they print."""
        result = subprocess.run(
            [str(self.client), "--no-defaults", f"--socket={self.socket}", "-uroot", "-N", "-B"],
            input=statements,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            raise MariaDBUnavailable(
                f"mariadb client failed ({result.returncode}) on {statements!r}: "
                f"{result.stderr.strip()}\n{self._log_tail()}"
            )
        return result.stdout

    def _log_tail(self) -> str:
        return self.log_file.read_text(errors="replace")[-2000:] if self.log_file.exists() else ""

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> MariaDBServer:
        """Install the system tables (first time), start the server, let root in over TCP
        without a password and create the database."""
        if self.data_dir.exists():
            self._start_server()
            return self
        if self._user is not None:
            os.chown(self.root, self._user.pw_uid, self._user.pw_gid)
        result = subprocess.run(
            [
                str(self.install_db),
                "--no-defaults",
                f"--datadir={self.data_dir}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
                *([f"--user={self._user.pw_name}"] if self._user is not None else []),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=self.root,
            check=False,
            **self._as_server_user(),
        )
        if result.returncode != 0:
            raise MariaDBUnavailable(
                f"mariadb-install-db failed ({result.returncode}): "
                f"{result.stderr.strip() or result.stdout.strip()}"
            )
        self._start_server()
        self._load_time_zones()
        self.sql(
            "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';"
            "GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;"
            f"CREATE DATABASE `{self.database}` CHARACTER SET {CHARSET} COLLATE {COLLATION};"
        )
        return self

    def _load_time_zones(self) -> None:
        """Load the system's zone definitions into the server (``mysql.time_zone*``), as
        a site must: Django's date lookups in a time zone (the admin's date hierarchy,
        ``__date``) convert with ``CONVERT_TZ``, which answers NULL without them."""
        zoneinfo = Path("/usr/share/zoneinfo")
        if not zoneinfo.is_dir():
            raise MariaDBUnavailable(f"{zoneinfo} is missing: install the tzdata package")
        result = subprocess.run(
            [str(find_binary("mariadb-tzinfo-to-sql")), str(zoneinfo)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if result.returncode != 0:
            raise MariaDBUnavailable(f"mariadb-tzinfo-to-sql failed: {result.stderr.strip()}")
        self.sql("USE mysql;\n" + result.stdout)

    def _start_server(self) -> None:
        command = [
            str(self.server),
            "--no-defaults",
            f"--datadir={self.data_dir}",
            f"--socket={self.socket}",
            f"--pid-file={self.root / 'mariadbd.pid'}",
            f"--log-error={self.log_file}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            "--skip-name-resolve",
            f"--character-set-server={CHARSET}",
            f"--collation-server={COLLATION}",
            "--default-time-zone=+00:00",
            "--max-connections=300",
            # Durability is not what the tests test: a commit does not wait for the disk.
            "--innodb-flush-log-at-trx-commit=0",
            "--innodb-doublewrite=0",
            "--innodb-buffer-pool-size=128M",
            "--skip-log-bin",
            # Each deadlock's transactions and statements go to the log (ENV_LOG), which a
            # test that finds one in a node's log shows.
            "--innodb-print-all-deadlocks=ON",
            *([f"--user={self._user.pw_name}"] if self._user is not None else []),
        ]
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=self.root,
            **self._as_server_user(),
        )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise MariaDBUnavailable(
                    f"mariadbd exited with status {self._process.returncode} at start:\n"
                    f"{self._log_tail()}"
                )
            if self._answers():
                return
            time.sleep(0.1)
        self._kill()
        raise MariaDBUnavailable(
            f"mariadbd did not answer within {START_TIMEOUT:.0f} s:\n{self._log_tail()}"
        )

    def _answers(self) -> bool:
        if not self.socket.exists():
            return False
        result = subprocess.run(
            [
                str(self.client),
                "--no-defaults",
                f"--socket={self.socket}",
                "-uroot",
                "-e",
                "SELECT 1",
            ],
            capture_output=True,
            timeout=30,
            check=False,
        )
        return result.returncode == 0

    def _kill(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=START_TIMEOUT)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: a clean shutdown, clients disconnected;
        ``immediate``: SIGKILL, a crash)."""
        process = self._process
        if process is None or process.poll() is not None:
            self._process = None
            return
        if mode == "immediate":
            self._kill()
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=START_TIMEOUT)
        except subprocess.TimeoutExpired:
            self._kill()
            raise MariaDBUnavailable(
                f"mariadbd did not stop within {START_TIMEOUT:.0f} s:\n{self._log_tail()}"
            ) from None
        self._process = None


def main(argv: list[str] | None = None) -> int:
    return run_command(
        argv,
        "tests.mariadbcluster",
        MariaDBServer,
        lambda db: f"MariaDB {db.version()}",
    )


if __name__ == "__main__":
    sys.exit(main())
