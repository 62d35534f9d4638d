"""``manage.py runscheduler``: run a scheduler node until SIGTERM or Ctrl-C."""

from __future__ import annotations

import atexit
import dataclasses
import functools
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from django_htask._version import __version__
from django_htask.apps import HTASK_BACKEND, is_htask_backend
from django_htask.code_schedules import sync_schedules
from django_htask.conf import POOLS, HtaskSettings, get_settings
from django_htask.exceptions import InvalidSchedule, NotMigrated
from django_htask.management.database import add_database_option, database_of
from django_htask.management.forked import Forked
from django_htask.models import Node as NodeRow
from django_htask.node import EXIT_STUCK, Node, NodeStats, StartAborted
from django_htask.queues import QueueFilter
from django_htask.store import get_store

if TYPE_CHECKING:
    from django_htask.metrics import MetricsServer

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
#: The exit status of a node that found it had been declared dead by the others.
EXIT_FENCED = 3
#: Seconds a process runs at least before it starts afresh for its stuck threads: a
#: node that gets stuck again at once waits out the rest, so it never restarts in a loop.
REEXEC_MIN_UPTIME = 5.0
#: The highest TCP port.
PORT_MAX = 65535
#: The longest node id (the width of the column).
NODE_ID_MAX = NodeRow._meta.get_field("id").max_length or 100

logger = logging.getLogger(__name__)


def _add_node_arguments(parser: CommandParser, htask: HtaskSettings) -> None:
    """Who the node is, where its database is, how it looks for work and logs."""
    parser.add_argument(
        "--workers", type=int, default=htask.workers, help=f"worker threads ({htask.workers})"
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        metavar="N",
        help="run N nodes, each a process forked from this one once Django is set up "
        "(1: this process is the node; several need PostgreSQL, MySQL or MariaDB)",
    )
    parser.add_argument("--node-id", default=None, help="this node's id (host-pid-random)")
    add_database_option(parser)
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=htask.poll_interval,
        help=f"seconds between looks for changes by other processes ({htask.poll_interval})",
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


def _add_serving_arguments(parser: CommandParser) -> None:
    """What the node runs, and when it exits by itself."""
    parser.add_argument(
        "--queue",
        action="append",
        default=[],
        metavar="NAME",
        help="serve only this queue (repeat it for several; '*' or none: every queue)",
    )
    parser.add_argument(
        "--exclude-queue",
        action="append",
        default=[],
        metavar="NAME",
        help="serve every queue but this one (repeatable)",
    )
    parser.add_argument(
        "--backend",
        default=None,
        metavar="ALIAS",
        help="run only the django.tasks tasks enqueued through this TASKS alias (no "
        "schedules, no tasks of django-htask's own)",
    )
    parser.add_argument(
        "--max-tasks",
        type=int,
        default=None,
        metavar="N",
        help="exit once N one-off tasks have run",
    )
    parser.add_argument(
        "--batch",
        action="store_true",
        help="exit once nothing is due and nothing runs (for cron jobs and tests)",
    )


def _add_pool_arguments(parser: CommandParser, htask: HtaskSettings) -> None:
    """Where the calls run, and what becomes of workers that wear out or get stuck."""
    parser.add_argument(
        "--pool",
        choices=POOLS,
        default=htask.pool,
        help=f"where the calls run: in the worker threads, or in a worker process per "
        f"worker thread ({htask.pool})",
    )
    parser.add_argument(
        "--max-tasks-per-child",
        type=int,
        default=None,
        metavar="N",
        help="with --pool process: replace a worker process after N calls (0: never; "
        f"{htask.max_tasks_per_child})",
    )
    parser.add_argument(
        "--max-memory-per-child",
        type=int,
        default=None,
        metavar="MIB",
        help="with --pool process: replace a worker process after a call that took its "
        f"memory past MIB MiB (0: never; {htask.max_memory_per_child})",
    )
    parser.add_argument(
        "--exit-when-stuck",
        action="store_true",
        help="when more than MAX_ABANDONED_THREADS worker threads are stuck, exit with "
        f"status {EXIT_STUCK} for a supervisor (systemd, Kubernetes) to start it again, "
        "rather than start afresh by itself",
    )


def _add_metrics_arguments(parser: CommandParser) -> None:
    """Where the node serves its Prometheus metrics."""
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics (the database's and this node's) at "
        "http://ADDR:PORT/metrics (needs django-htask[metrics]; 0: any free port)",
    )
    parser.add_argument(
        "--metrics-addr",
        default="127.0.0.1",
        metavar="ADDR",
        help="the address the metrics are served on (127.0.0.1; 0.0.0.0: every one)",
    )


def _stop_on_signals(
    node: Node, signals: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)
) -> dict[signal.Signals, Any]:
    """Make ``signals`` (SIGTERM and Ctrl-C) ask ``node`` to stop, and a second one end
    the process at once; returns the handlers they had, to put back."""
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

    return {sig: signal.signal(sig, on_signal) for sig in signals}


class Command(BaseCommand):
    #: Whether the command line is the process's own (``manage.py runscheduler``),
    #: which it may then run again in place of itself.
    own_process = False
    help = (
        "Run the scheduler: fire schedules and one-off tasks from the database until "
        "SIGTERM or Ctrl-C (a second signal exits at once)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        htask = get_settings()
        _add_node_arguments(parser, htask)
        _add_serving_arguments(parser)
        _add_pool_arguments(parser, htask)
        _add_metrics_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        if get_settings().eager:
            raise CommandError(
                "HTASK['EAGER'] is on: tasks run in the processes that schedule them, and "
                "a node would take them from there; turn it off to run a scheduler"
            )
        began = time.monotonic()
        self._check_numbers(options)
        try:
            queues = QueueFilter.of(options["queue"], options["exclude_queue"])
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        backend: str | None = options["backend"]
        if backend is not None:
            self._check_backend(backend)
        using = database_of(options)
        if options["processes"] > 1:
            self._check_processes(options, using)
        self._check_metrics_port(options["metrics_port"])
        htask = self._pool_settings(options)
        self._configure_logging(options["log_level"])
        make_node = functools.partial(
            Node,
            settings=htask,
            node_id=options["node_id"],
            workers=options["workers"],
            poll_interval=options["poll_interval"],
            queues=queues,
            backend=backend,
            max_tasks=options["max_tasks"],
            batch=options["batch"],
        )
        if options["processes"] > 1:
            self._fork_nodes(options, using, make_node)
            return
        node = make_node(store=get_store(using))
        metrics = self._serve_metrics(options, node, using)
        if self._run(node, options, using, metrics):
            self._report_stop(node, options, began)

    @staticmethod
    def _check_processes(options: dict[str, Any], using: str) -> None:
        """``--processes`` above 1 goes with the options and the database it needs."""
        count: int = options["processes"]
        if not hasattr(os, "fork"):
            raise CommandError(f"--processes {count}: this platform cannot fork a process")
        for option, why in (
            ("node_id", "names one node (each node process gets an id of its own)"),
            ("metrics_port", "serves one node's metrics (run the nodes as separate commands)"),
        ):
            if options[option] is not None:
                flag = "--" + option.replace("_", "-")
                raise CommandError(f"--processes {count}: leave out {flag}, which {why}")
        store = get_store(using)
        if not store.supports_several_nodes:
            name = connections[using].display_name
            raise CommandError(
                f"--processes {count}: the {name} database {using!r} is for one node; "
                "several nodes need PostgreSQL, MySQL or MariaDB"
            )

    def _fork_nodes(
        self, options: dict[str, Any], using: str, make_node: Callable[..., Node]
    ) -> None:
        """Run ``--processes`` nodes, each in a process forked from this one (see
        :mod:`django_htask.management.forked`), until they have all stopped; end with
        the group's exit status."""
        connections.close_all()  # a connection is no node process's to share

        def say(message: str) -> None:
            self.stdout.write(message)
            self.stdout.flush()

        def run_node(slot: int, ready: Callable[[], None]) -> int:
            # A node process is no command line of its own: never run again in place.
            self.own_process = False
            began = time.monotonic()
            node = make_node(store=get_store(using))
            try:
                if self._run(
                    node,
                    options,
                    using,
                    None,
                    ready=ready,
                    orphaned=forked.orphaned,
                    signals=(signal.SIGTERM,),
                ):
                    self._report_stop(node, options, began)
            except CommandError as exc:
                self.stderr.write(f"CommandError: {exc}")
                return 1
            return 0

        forked = Forked(
            options["processes"],
            run_node,
            finite=options["batch"] or options["max_tasks"] is not None,
            min_uptime=REEXEC_MIN_UPTIME,
            write=say,
        )
        status = forked.run()
        if status:
            self._exit_now(status, f"stopped: exit status {status} (see above)")
        self.stdout.write("stopped.")

    @staticmethod
    def _check_numbers(options: dict[str, Any]) -> None:
        """``--workers``, ``--poll-interval``, ``--node-id`` and ``--max-tasks`` are in
        their ranges."""
        workers: int = options["workers"]
        poll: float = options["poll_interval"]
        if workers < 0:
            raise CommandError(f"--workers must be >= 0, got {workers}")
        if not 0 < poll < math.inf:
            raise CommandError(f"--poll-interval must be a finite number > 0, got {poll}")
        node_id: str | None = options["node_id"]
        if node_id is not None and not 0 < len(node_id) <= NODE_ID_MAX:
            raise CommandError(
                f"--node-id must be 1 to {NODE_ID_MAX} characters, got {len(node_id)}"
            )
        processes: int = options["processes"]
        if processes < 1:
            raise CommandError(f"--processes must be >= 1, got {processes}")
        max_tasks: int | None = options["max_tasks"]
        if max_tasks is not None and max_tasks <= 0:
            raise CommandError(f"--max-tasks must be greater than zero, got {max_tasks}")

    @staticmethod
    def _check_metrics_port(port: int | None) -> None:
        """``--metrics-port`` is a TCP port and the metrics' extra is installed, checked
        before the node starts so that a typo fails at once."""
        if port is None:
            return
        if not 0 <= port <= PORT_MAX:
            raise CommandError(f"--metrics-port must be 0 to {PORT_MAX}, got {port}")
        from django_htask.metrics import require_prometheus  # noqa: PLC0415  (only here)

        try:
            require_prometheus()
        except ImproperlyConfigured as exc:
            raise CommandError(f"--metrics-port: {exc}") from exc

    @staticmethod
    def _serve_metrics(options: dict[str, Any], node: Node, using: str) -> MetricsServer | None:
        """The metrics server ``--metrics-port`` asks for, serving already, or None."""
        port: int | None = options["metrics_port"]
        if port is None:
            return None
        from django_htask.metrics import serve  # noqa: PLC0415

        addr: str = options["metrics_addr"]
        try:
            return serve(port, addr, node_id=node.node_id, using=using)
        except OSError as exc:
            raise CommandError(
                f"--metrics-port: cannot serve metrics on {addr}:{port}: {exc}"
            ) from exc

    def _run(
        self,
        node: Node,
        options: dict[str, Any],
        using: str,
        metrics: MetricsServer | None,
        *,
        ready: Callable[[], None] | None = None,
        orphaned: Callable[[], bool] | None = None,
        signals: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT),
    ) -> bool:
        """Start the node and wait for one of ``signals`` (or the node itself, or, for a
        node process, ``orphaned`` saying its parent has gone) to stop it, then stop it.
        False if it was stopped before it could reach the database. ``ready`` is called
        once the node has started."""
        previous = _stop_on_signals(node, signals)
        # Who and where first: the start logs (the sync, a reap of nodes gone) come after.
        self.stdout.write(self._heading(node))
        self.stdout.flush()
        try:
            try:
                stats = node.start(
                    sync=None if options["no_sync"] else functools.partial(sync_schedules, using)
                )
            except StartAborted:
                self.stdout.write("stopped before the database could be reached.")
                return False
            except (NotMigrated, InvalidSchedule, ImproperlyConfigured) as exc:  # sync, pool
                raise CommandError(str(exc)) from exc
            self.stdout.write(
                self._banner(node, options["workers"], options["poll_interval"], stats, metrics)
            )
            self.stdout.flush()
            if ready is not None:
                ready()
            while not node.stop_requested:
                if orphaned is not None and orphaned():
                    node.request_stop()
                time.sleep(0.1)
            if not node.fenced:
                self.stdout.write(
                    f"stopping: waiting up to {node.settings.shutdown_timeout:g}s for running "
                    "jobs (a second signal exits at once)…"
                )
                self.stdout.flush()
        finally:
            node.stop()
            if metrics is not None:
                metrics.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return True

    def _report_stop(self, node: Node, options: dict[str, Any], began: float) -> None:
        """Say how the stopped node ended, and end the process with the status that
        tells a supervisor what to do (or start afresh for stuck threads)."""
        if node.fenced:
            # Its jobs may still run in their threads: end them with the process, now.
            self._exit_now(
                EXIT_FENCED,
                "stopped: this node had been declared dead by the others "
                "(see the log); start it again to rejoin",
            )
        if node.exit_status == EXIT_STUCK and self.own_process and not options["exit_when_stuck"]:
            self._start_afresh(node, began)
        if node.exit_status:
            # Its stuck threads are daemons, but say it and end at once all the same.
            self._exit_now(
                node.exit_status,
                f"stopped: {node.done}; exit status {node.exit_status}, for a supervisor "
                "to start it again (see the log)",
            )
        if node.done:
            self.stdout.write(f"{node.done}.")
        if node.unfinished:
            self._exit_now(
                0,
                f"stopped, leaving {node.unfinished} runs unfinished (interrupted: "
                "SHUTDOWN_TIMEOUT was reached).",
            )
        self.stdout.write("stopped.")

    def run_from_argv(self, argv: list[str]) -> None:
        """As ``manage.py`` runs it: once the node has stopped cleanly, the process ends
        at once rather than tearing the interpreter down module by module, which takes
        a quarter of a second with Django loaded (a supervisor stopping or restarting
        nodes waits for it). Only when the command line is the process's own:
        ``call_command`` and ``execute_from_command_line([...])`` from a program (tests,
        a batch run in a script) return as usual."""
        self.own_process = list(argv) == sys.argv
        super().run_from_argv(argv)
        if not self.own_process:
            return  # execute_from_command_line([...]) inside a program (a test, a script)
        main = threading.main_thread()
        if any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate()):
            return  # non-daemon threads of the project's own: Python waits for them
        connections.close_all()
        atexit._run_exitfuncs()  # the project's exit handlers and logging.shutdown
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    @staticmethod
    def _pool_settings(options: dict[str, Any]) -> HtaskSettings:
        """The settings with ``--pool`` and its limits applied."""
        changes: dict[str, Any] = {"pool": options["pool"]}
        for option in ("max_tasks_per_child", "max_memory_per_child"):
            value: int | None = options[option]
            if value is None:
                continue
            flag = "--" + option.replace("_", "-")
            if value < 0:
                raise CommandError(f"{flag} must be >= 0 (0: no limit), got {value}")
            if options["pool"] != "process":
                raise CommandError(f"{flag} is for the process pool: add --pool process")
            changes[option] = value
        if options["pool"] == "process" and options["workers"] < 1:
            raise CommandError(
                f"--pool process needs --workers >= 1 (a worker process each), got "
                f"{options['workers']}"
            )
        return dataclasses.replace(get_settings(), **changes)

    def _start_afresh(self, node: Node, began: float) -> NoReturn:
        """Run this command line again in place of the process, once the node has
        stopped as any stop does: the stuck threads go with the old process image, and
        the new one joins as a new node (a new id, unless ``--node-id`` names it), with
        all its workers. A process that ran less than :data:`REEXEC_MIN_UPTIME` waits
        out the rest first; a signal meanwhile ends it instead."""
        argv = [sys.executable, *sys.orig_argv[1:]]
        pause = max(0.0, REEXEC_MIN_UPTIME - (time.monotonic() - began))
        logger.warning(
            "node %s stopped: %s; starting afresh in %.0fs, in a new process image, as a "
            "new node: %s",
            node.node_id,
            node.done,
            pause,
            " ".join(argv),
            extra={"action": "node_reexec", "node": node.node_id, "stuck": node.stuck_threads},
        )
        self.stdout.write(
            f"stopped: {node.done}; starting afresh in {pause:.0f}s, as a new node "
            f"(--exit-when-stuck: exit with status {EXIT_STUCK} instead)"
        )
        self.stdout.flush()
        asked: list[int] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, frame: asked.append(signum))
        deadline = time.monotonic() + pause
        while not asked and time.monotonic() < deadline:
            time.sleep(0.05)
        if asked:
            self._exit_now(0, "stopped (a signal came before it started afresh).")
        connections.close_all()
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        try:
            os.execv(sys.executable, argv)
        except OSError as exc:
            self._exit_now(EXIT_STUCK, f"could not start afresh ({exc}): exit status {EXIT_STUCK}")

    def _exit_now(self, code: int, message: str) -> NoReturn:
        """End the process at once, jobs still running in their threads included
        (``sys.exit`` would wait for them): what must be written is written."""
        self.stdout.write(message)
        self.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(code)

    @staticmethod
    def _check_backend(alias: str) -> None:
        """``alias`` must name a TASKS alias that uses django-htask's backend."""
        configured = getattr(settings, "TASKS", None)
        aliases = sorted(configured) if isinstance(configured, dict) else []
        if alias not in aliases:
            known = ", ".join(aliases) or "none"
            raise CommandError(f"--backend {alias!r}: no such alias in TASKS (known: {known})")
        if not is_htask_backend(configured[alias].get("BACKEND")):  # type: ignore[index]
            raise CommandError(
                f"--backend {alias!r}: TASKS[{alias!r}] is not django-htask's backend "
                f"({HTASK_BACKEND})"
            )

    @staticmethod
    def _heading(node: Node) -> str:
        """The banner's first lines, printed before the node starts."""
        return (
            f"django-htask {__version__} scheduler\n"
            f"  node:      {node.node_id}\n"
            f"  database:  {node.store.describe()}"
        )

    @staticmethod
    def _banner(
        node: Node, workers: int, poll: float, stats: NodeStats, metrics: MetricsServer | None
    ) -> str:
        """The rest of the banner, once the node has started: what it loaded."""
        serving = node.serving
        queues = "every queue" if serving.queues.serves_all else str(serving.queues)
        if serving.backend is not None:
            queues += f" (django.tasks tasks of TASKS[{serving.backend!r}] only)"
        if serving.states:  # what an operator set on queues, as read at start
            queues += f"; {serving.states} (htask queue list)"
        mode = "".join(
            part
            for part, on in (
                (f", exits after {node.max_tasks} tasks", node.max_tasks is not None),
                (", exits when nothing is due (--batch)", node.batch),
            )
            if on
        )
        return (
            f"  workers:   {Command._workers(node, workers)}\n"
            f"  queues:    {queues}{mode}\n"
            f"  poll:      every {poll:g}s\n"
            f"  loaded:    {stats.schedules} schedules, {stats.pending_tasks} pending "
            f"tasks{Command._next_due(stats)}\n"
            + (f"  metrics:   {metrics.url}\n" if metrics is not None else "")
            + "  stop:      Ctrl-C or SIGTERM (a second one exits at once)"
        )

    @staticmethod
    def _workers(node: Node, workers: int) -> str:
        if node.processes is None:
            return str(workers or "a thread per job")
        limits = [
            f"{limit} {unit}"
            for limit, unit in (
                (node.settings.max_tasks_per_child, "calls"),
                (node.settings.max_memory_per_child, "MiB"),
            )
            if limit
        ]
        each = f", each replaced after {' or '.join(limits)}" if limits else ""
        return f"{workers} worker processes{each}"

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
