"""``manage.py runscheduler``: run a scheduler node until SIGTERM or Ctrl-C."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

import django_htask
from django_htask.conf import get_settings
from django_htask.node import Node, NodeStats, StartAborted

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


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
            self.stdout.write(self._banner(node, workers, poll, stats))
            self.stdout.flush()
            while not node.stop_requested:
                time.sleep(0.1)
            self.stdout.write(
                f"stopping: waiting up to {node.settings.shutdown_timeout:g}s for running "
                "jobs (a second signal exits at once)…"
            )
            self.stdout.flush()
        finally:
            node.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self.stdout.write("stopped.")

    @staticmethod
    def _banner(node: Node, workers: int, poll: float, stats: NodeStats) -> str:
        return (
            f"django-htask {django_htask.__version__} scheduler\n"
            f"  node:      {node.node_id}\n"
            f"  database:  {node.store.describe()}\n"
            f"  workers:   {workers or 'a thread per job'}\n"
            f"  poll:      every {poll:g}s\n"
            f"  loaded:    {stats.schedules} schedules, {stats.pending_tasks} pending "
            f"tasks ({stats.held_tasks} due within {node.settings.lookahead:g}s, held)\n"
            "  stop:      Ctrl-C or SIGTERM (a second one exits at once)"
        )

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
