"""What the throw-away database servers of the tests share (tests/pgcluster.py,
tests/mariadbcluster.py): a free port, the life cycle of a server in a temporary
directory, and running a command against a fresh one."""

from __future__ import annotations

import abc
import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

__all__ = ["ENV_LOG", "ENV_URL", "ThrowAwayServer", "free_port", "run_command", "url_settings"]

#: The variable that hands the server down to the tests (tests/settings.py reads it).
ENV_URL = "HTASK_TEST_DATABASE_URL"
#: The server's log, for a test that shows what the server saw when it fails.
ENV_LOG = "HTASK_TEST_DATABASE_LOG"


def url_settings(url: str, engine: str, schemes: tuple[str, ...]) -> dict[str, Any]:
    """A Django ``DATABASES`` entry for ``scheme://user[:password]@host[:port]/name``
    (a ValueError naming the URL unless its scheme is one of ``schemes``)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in schemes or not parts.path.strip("/"):
        raise ValueError(
            f"{ENV_URL} must look like {schemes[-1]}://user@host:port/name, got {url!r}"
        )
    return {
        "ENGINE": engine,
        "NAME": urllib.parse.unquote(parts.path.strip("/")),
        "USER": urllib.parse.unquote(parts.username or ""),
        "PASSWORD": urllib.parse.unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ThrowAwayServer(abc.ABC):
    """A database server in the temporary directory ``root``, removed when done."""

    #: What ``start`` and ``stop`` raise when the server cannot start or stop.
    unavailable: type[RuntimeError] = RuntimeError
    root: Path
    #: The server's own log (``HTASK_TEST_DATABASE_LOG`` for the command it runs).
    log_file: Path

    @property
    @abc.abstractmethod
    def url(self) -> str:
        """Where the tests reach it (``HTASK_TEST_DATABASE_URL``)."""

    @abc.abstractmethod
    def start(self) -> Self:
        """Create the server's files (first time), start it and create the database."""

    @abc.abstractmethod
    def _start_server(self) -> None:
        """Start the server on its files, on the same port."""

    @abc.abstractmethod
    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: cleanly, clients disconnected; ``immediate``: a
        crash)."""

    def restart(self, down_for: float = 0.0) -> None:
        """Stop the server, stay down ``down_for`` seconds, start it again on the same port."""
        self.stop()
        if down_for:
            time.sleep(down_for)
        self._start_server()

    def destroy(self) -> None:
        with contextlib.suppress(self.unavailable):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.destroy()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.destroy()


Server = TypeVar("Server", bound=ThrowAwayServer)


def run_command(
    argv: list[str] | None, prog: str, make: Callable[[], Server], banner: Callable[[Server], str]
) -> int:
    """The command line of a throw-away server: run the command after ``--`` with
    ``HTASK_TEST_DATABASE_URL`` pointing at a fresh server (and ``HTASK_TEST_DATABASE_LOG``
    at its log); its exit status."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {prog}", description="Run a command against a throw-away database."
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give a command to run, after --")
    with make() as server:
        print(f"{banner(server)} at {server.url}", file=sys.stderr, flush=True)
        env = dict(os.environ, **{ENV_URL: server.url, ENV_LOG: str(server.log_file)})
        return subprocess.call(command, env=env)
