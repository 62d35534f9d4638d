"""``manage.py runscheduler``: run a scheduler node until SIGTERM or Ctrl-C."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from types import FrameType
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandError, CommandParser

import django_htask
from django_htask.conf import get_settings
from django_htask.exceptions import NotMigrated
from django_htask.node import Node, NodeStats, StartAborted

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
#: The exit status of a node that found it had been declared dead by the others.
EXIT_FENCED = 3


class Command(BaseCommand):
    help = (
        "Run the scheduler: fire schedules and one-off tasks from the database until "
        "SIGTERM or Ctrl-C (a second signal exits at once)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        s = get_settings()
        parser.add_argument(
            "--workers", type=int, default=s.workers, help=f"worker threads ({s.workers})"
        )
        parser.add_argument("--node-id", default=None, help="this node's id (host-pid-random)")
        parser.add_argument(
            "--poll-interval",
            type=float,
            default=s.poll_interval,
            help=f"seconds between looks for changes by other processes ({s.poll_interval})",
        )
        parser.add_argument(
            "--log-level",
            default="INFO",
            choices=LEVELS,
            type=str.upper,
            help="level of the django_htask loggers (INFO)",
        )
        parser.add_argument(
            "--no-sync",
            action="store_true",
            help="do not create or update the code-defined schedules at start",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        workers: int = options["workers"]
        poll: float = options["poll_interval"]
        if workers < 0:
            raise CommandError(f"--workers must be >= 0, got {workers}")
        if not poll > 0:
            raise CommandError(f"--poll-interval must be > 0, got {poll}")
        self._configure_logging(options["log_level"])
        node = Node(node_id=options["node_id"], workers=workers, poll_interval=poll)
        signals_seen = 0

        def on_signal(signum: int, frame: FrameType | None) -> None:
            # Only flags here: the main thread does the work outside the handler.
            nonlocal signals_seen
            signals_seen += 1
            if signals_seen > 1:
                sys.stderr.write(f"second signal ({signal.Signals(signum).name}): exiting now\n")
                sys.stderr.flush()
                os._exit(1)
            node.request_stop()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            try:
                stats = node.start(sync_code=not options["no_sync"])
            except StartAborted:
                self.stdout.write("stopped before the database could be reached.")
                return
            except NotMigrated as exc:
                raise CommandError(str(exc)) from exc
            self.stdout.write(self._banner(node, workers, poll, stats))
            self.stdout.flush()
            while not node.stop_requested:
                time.sleep(0.1)
            if not node.fenced:
                self.stdout.write(
                    f"stopping: waiting up to {node.settings.shutdown_timeout:g}s for running "
                    "jobs (a second signal exits at once)…"
                )
                self.stdout.flush()
        finally:
            node.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if node.fenced:
            # Its jobs may still run in their threads: end them with the process, now.
            self._exit_now(
                EXIT_FENCED,
                "stopped: this node had been declared dead by the others "
                "(see the log); start it again to rejoin",
            )
        if node.unfinished:
            self._exit_now(
                0,
                f"stopped, leaving {node.unfinished} runs unfinished (interrupted: "
                "SHUTDOWN_TIMEOUT was reached).",
            )
        self.stdout.write("stopped.")

    def _exit_now(self, code: int, message: str) -> NoReturn:
        """End the process at once, jobs still running in their threads included
        (``sys.exit`` would wait for them): what must be written is written."""
        self.stdout.write(message)
        self.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(code)

    @staticmethod
    def _banner(node: Node, workers: int, poll: float, stats: NodeStats) -> str:
        return (
            f"django-htask {django_htask.__version__} scheduler\n"
            f"  node:      {node.node_id}\n"
            f"  database:  {node.store.describe()}\n"
            f"  workers:   {workers or 'a thread per job'}\n"
            f"  poll:      every {poll:g}s\n"
            f"  loaded:    {stats.schedules} schedules, {stats.pending_tasks} pending "
            f"tasks{Command._next_due(stats)}\n"
            "  stop:      Ctrl-C or SIGTERM (a second one exits at once)"
        )

    @staticmethod
    def _next_due(stats: NodeStats) -> str:
        if stats.next_task_due is None:
            return ""
        return f" (next due {stats.next_task_due:%Y-%m-%d %H:%M:%S} UTC)"

    @staticmethod
    def _configure_logging(level: str) -> None:
        logger = logging.getLogger("django_htask")
        logger.setLevel(level)
        if not logger.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(
                logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
            )
            logger.addHandler(handler)
