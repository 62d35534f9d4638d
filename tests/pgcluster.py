"""A throw-away PostgreSQL cluster for the tests: initdb in a temporary directory,
a free port on 127.0.0.1, removed when done.

As a command, it runs another command with ``HTASK_TEST_DATABASE_URL`` pointing at a
fresh cluster::

    python -m tests.pgcluster -- pytest tests/integration

As a library (acceptance tests restart the server mid-run)::

    with PostgresCluster() as pg:
        pg.url            # postgresql://postgres@127.0.0.1:PORT/htask
        pg.restart()

The server binaries are looked up in ``$PG_BIN``, then ``/usr/lib/postgresql/*/bin``
(highest version first), then ``$PATH``. PostgreSQL refuses to run as root, so when
the tests run as root the cluster runs as the ``postgres`` system user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.throwaway import ThrowAwayServer, free_port, run_command, url_settings

__all__ = ["PostgresCluster", "PostgresUnavailable", "database_settings", "find_bin_dir"]


class PostgresUnavailable(RuntimeError):
    """The PostgreSQL server binaries cannot be found or the server does not start."""


def database_settings(url: str) -> dict[str, Any]:
    """A Django ``DATABASES`` entry for ``postgresql://user[:password]@host[:port]/name``."""
    return url_settings(url, "django.db.backends.postgresql", ("postgres", "postgresql"))


def find_bin_dir() -> Path:
    candidates = []
    if os.environ.get("PG_BIN"):
        candidates.append(os.environ["PG_BIN"])
    candidates += sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
        reverse=True,
    )
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(str(Path(on_path).parent))
    for candidate in candidates:
        path = Path(candidate)
        if (path / "initdb").exists() and (path / "postgres").exists():
            return path
    raise PostgresUnavailable(
        "PostgreSQL server binaries (initdb, postgres) not found: set PG_BIN or install "
        f"the postgresql package (looked in {candidates or 'nothing'})"
    )


class PostgresCluster(ThrowAwayServer):
    """One PostgreSQL server in a temporary directory, for one test run."""

    unavailable = PostgresUnavailable

    def __init__(self, database: str = "htask", port: int | None = None) -> None:
        self.bin_dir = find_bin_dir()
        self.database = database
        self.port = port or free_port()
        self.root = Path(tempfile.mkdtemp(prefix="htask-pg-"))
        self.data_dir = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.log_file = self.root / "server.log"
        self._user: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            try:
                self._user = pwd.getpwnam("postgres")
            except KeyError as exc:
                raise PostgresUnavailable(
                    "running as root, and there is no 'postgres' system user to run the server as"
                ) from exc

    # -- properties ------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{self.database}"

    def settings(self) -> dict[str, object]:
        """A Django ``DATABASES`` entry for this cluster."""
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": self.database,
            "USER": "postgres",
            "HOST": "127.0.0.1",
            "PORT": str(self.port),
        }

    # -- running things as the server's user ---------------------------------------------
    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        kwargs: dict[str, object] = {}
        if self._user is not None:
            kwargs["user"] = self._user.pw_uid
            kwargs["group"] = self._user.pw_gid
            kwargs["extra_groups"] = []
        return subprocess.run(  # type: ignore[call-overload, no-any-return]
            list(args),
            check=check,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.root,
            **kwargs,
        )

    def _pg_ctl(self, *args: str) -> None:
        result = self._run(
            str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log_file),
            *args, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            log = self.log_file.read_text() if self.log_file.exists() else ""
            raise PostgresUnavailable(
                f"pg_ctl {' '.join(args)} failed ({result.returncode}): "
                f"{result.stderr.strip()}\n{log[-2000:]}"
            )

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> PostgresCluster:
        """initdb (first time), start the server and create the database."""
        if not self.data_dir.exists():
            self.socket_dir.mkdir(parents=True, exist_ok=True)
            if self._user is not None:
                for path in (self.root, self.socket_dir):
                    os.chown(path, self._user.pw_uid, self._user.pw_gid)
            result = self._run(
                str(self.bin_dir / "initdb"), "-D", str(self.data_dir), "-U", "postgres",
                "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync", check=False,
            )  # fmt: skip
            if result.returncode != 0:
                raise PostgresUnavailable(f"initdb failed: {result.stderr.strip()}")
            self._start_server()
            createdb = self.bin_dir / "createdb"
            self._run(
                str(createdb) if createdb.exists() else "createdb",
                "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", self.database,
            )  # fmt: skip
        else:
            self._start_server()
        return self

    def _start_server(self) -> None:
        options = " ".join(
            [
                f"-p {self.port}",
                "-c listen_addresses=127.0.0.1",
                f"-c unix_socket_directories={self.socket_dir}",
                "-c fsync=off",
                "-c synchronous_commit=off",
                "-c full_page_writes=off",
                "-c max_connections=200",
                "-c shared_buffers=64MB",
            ]
        )
        self._pg_ctl("-w", "-t", "60", "-o", options, "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: roll back and disconnect clients; ``immediate``: crash)."""
        if (self.data_dir / "postmaster.pid").exists():
            self._pg_ctl("-w", "-t", "60", "-m", mode, "stop")


def main(argv: list[str] | None = None) -> int:
    return run_command(
        argv,
        "tests.pgcluster",
        PostgresCluster,
        lambda pg: f"PostgreSQL {pg.bin_dir.parent.name}",
    )


if __name__ == "__main__":
    sys.exit(main())
