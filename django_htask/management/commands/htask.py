"""``manage.py htask``: look at and drive the scheduler from the shell.

``htask list [--runs N]``
    every schedule, like ``crontab -l``: name, the schedule in words, the next runs
    (from the stored ``next_run_at``: the ones the scheduler will fire).
``htask run NAME``
    run a schedule now, in this process, recorded as a run.
``htask sync``
    create or update the schedules declared with ``@periodic`` (orphan the ones gone).
``htask status``
    the nodes (live or dead), pending tasks, broken schedules and recent failures.
``htask prune [--dry-run] [--days N]``
    delete now what is past its retention (finished tasks with their runs, old runs,
    rows of nodes stopped long ago), as the nodes do by themselves every few minutes;
    ``--dry-run`` counts it; ``--days N`` keeps N days of everything instead of the
    settings (see :mod:`django_htask.retention`).
``htask health [--node ID] [--max-late SECONDS]``
    one line, ``healthy: …`` (exit 0) or ``unhealthy: …`` (exit 1): the database
    answers, a node (or node ID) is live and no due work waits longer than SECONDS
    (60); for probes and cron (see :mod:`django_htask.health`).
``htask import-celery-beat [--dry-run] [--map CELERY_NAME=module:function …]``
    create a schedule for each of django-celery-beat's periodic tasks, listing what
    is not carried over and why (see :mod:`django_htask.celery_beat`).
``htask retry ID… | --failed-since WHEN [--function F] [--status S] [--error E] [--dry-run]``
    send failed one-off tasks again (the admin's *Send again*): a fresh attempt count,
    their run history kept (see :func:`django_htask.operations.send_again`). Since
    WHEN, only those whose function raised or whose node died, unless ``--status``
    names others (``timed-out``, ``aborted``); ``--dry-run`` lists them.
``htask queue pause NAME | resume NAME | limit NAME N|none | list``
    pause or resume a queue on every node, limit how many of its tasks run at once
    across the nodes, or list the queues (see :mod:`django_htask.queue_control`).

Exit codes: 0 done; 1 the run failed, the scheduler is unhealthy or the database lacks
django_htask's tables (the message says to run ``manage.py migrate``); 2 bad usage or
an unknown schedule name.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError
from django.db.models import Count, Model, QuerySet

from django_htask import clock
from django_htask.code_schedules import sync_schedules
from django_htask.conf import get_settings
from django_htask.health import DEFAULT_MAX_LATE, check_health, parse_max_late, parse_node
from django_htask.management.database import add_database_option, database_of
from django_htask.models import Node, Queue, Run, RunStatus, Schedule, Task, TaskStatus
from django_htask.operations import (
    FOLLOWED_NOT_SENT,
    Failure,
    describe_schedule,
    failed_tasks,
    node_state,
    prune_now,
    run_schedule_inline,
    send_again,
    since_time,
    upcoming_runs,
    validate_zone,
)
from django_htask.overview import waiting_on_gates
from django_htask.queue_control import (
    QueueInfo,
    limit_queue,
    list_queues,
    pause_queue,
    resume_queue,
)
from django_htask.queues import DEFAULT_QUEUE
from django_htask.store import Pruned, not_migrated

ModelT = TypeVar("ModelT", bound=Model)

#: Exit code of a run that failed.
RUN_FAILED = 1
#: Exit code of ``htask health`` when the scheduler is unhealthy.
UNHEALTHY = 1
#: Exit code of bad usage (an unknown name, a bad option value).
USAGE = 2
#: Rows listed in one section of ``htask status``, at most.
SHOWN = 10
#: Rows between two lines of ``htask prune``'s progress.
PROGRESS_ROWS = 100_000
#: Nodes listed by ``htask status``, at most (the most recent heartbeats first): every
#: start registers a new node id, so the rows of stopped nodes pile up until pruned, and
#: a status is read in a terminal. The counts above the list count them all.
NODES_LISTED = 50
#: What ``htask retry --failed-since`` sends again unless ``--status`` says: the tasks
#: whose function raised or whose node died. A task that timed out may hang again (a
#: call stuck in C holds a worker until the node replaces it), and an aborted one was
#: stopped on purpose.
RETRIED = (Failure.ERROR, Failure.LOST)


def _filters(functions: list[str], error: str) -> str:
    """The filters of ``htask retry``, as words after what they filter."""
    words = [f" of {', '.join(functions)}"] if functions else []
    if error:
        words.append(f" with {error!r} in the error")
    return "".join(words)


class Command(BaseCommand):
    help = (
        "django-htask from the shell: list schedules, run one now, sync code-defined "
        "schedules, show the status, prune finished work, check health."
    )

    #: The database alias of this invocation (``--database``, else django_htask.db).
    using: str

    def add_arguments(self, parser: CommandParser) -> None:
        add_database_option(parser)
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        listing = sub.add_parser("list", help="every schedule and its next runs")
        listing.add_argument("--runs", type=int, default=3, help="next runs shown (3)")
        run = sub.add_parser("run", help="run a schedule now, here, recorded as a run")
        run.add_argument("name", help="the schedule's name")
        sub.add_parser("sync", help="create or update the code-defined schedules")
        status = sub.add_parser("status", help="nodes, pending tasks, recent failures")
        status.add_argument(
            "--hours", type=float, default=24.0, help="failures within this many hours (24)"
        )
        _add_prune_options(sub.add_parser("prune", help="delete finished work past its retention"))
        _add_health_options(
            sub.add_parser(
                "health", help="exit 0 if the database answers, a node is live, nothing late"
            )
        )
        _add_celery_beat_options(
            sub.add_parser(
                "import-celery-beat", help="create schedules from django-celery-beat's tasks"
            )
        )
        _add_queue_actions(sub.add_parser("queue", help="pause, resume, limit or list queues"))
        _add_retry_options(sub.add_parser("retry", help="send failed one-off tasks again"))

    def rows(self, model: type[ModelT]) -> QuerySet[ModelT]:
        """``model``'s rows on this invocation's database."""
        return model._default_manager.using(self.using)

    def execute(self, *args: Any, **options: Any) -> Any:
        if options.get("action") == "health":
            # A probe: Django's system checks may query the database (Django 6.1's
            # JSONField check does), so a database that is down would end in their
            # traceback instead of the one-line verdict; and they cost every probe.
            options["skip_checks"] = True
        return super().execute(*args, **options)

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        self.using = database_of(options, USAGE)
        try:
            getattr(self, f"do_{action.replace('-', '_')}")(**options)
        except DatabaseError as exc:
            missing = not_migrated(exc, self.using)
            if missing is None:
                raise
            raise CommandError(str(missing)) from exc

    # -- list ------------------------------------------------------------------------
    def do_list(self, runs: int, **options: Any) -> None:
        if runs < 0:
            raise CommandError(f"--runs must be >= 0, got {runs}", returncode=USAGE)
        rows = list(self.rows(Schedule).order_by("name"))
        if not rows:
            self.stdout.write("no schedules (code-defined ones appear after `htask sync`)")
            return
        now = clock.now()
        for row in rows:
            zone = row.timezone or "UTC"
            flags = [] if row.enabled else ["disabled"]
            if row.orphaned:
                flags.append("orphaned")
            if row.broken:
                flags.append("broken")
            flag = f"  [{', '.join(flags)}]" if flags else ""
            self.stdout.write(f"{row.name}{flag}")
            self.stdout.write(f"    {row.schedule}  ({describe_schedule(row.schedule, zone)})")
            queue = "" if row.queue_name == DEFAULT_QUEUE else f", queue {row.queue_name}"
            self.stdout.write(f"    runs {row.function}, {row.origin}-defined{queue}")
            if row.broken:
                self.stdout.write(f"    broken: {row.broken} (save it again to clear)")
                continue
            if not row.enabled or not runs:
                continue
            try:
                tz = validate_zone(zone)
                upcoming = upcoming_runs(row, runs, now)
            except ValueError as exc:
                self.stdout.write(f"    invalid: {exc}")
                continue
            if not upcoming:
                self.stdout.write("    next: none (will not fire again)")
            for run in upcoming:
                self.stdout.write(f"    next: {run.text(tz)}")

    # -- run -------------------------------------------------------------------------
    def do_run(self, name: str, **options: Any) -> None:
        row = self.rows(Schedule).filter(name=name).first()
        if row is None:
            known = list(self.rows(Schedule).order_by("name").values_list("name", flat=True)[:20])
            hint = f" (known: {', '.join(known)})" if known else " (there are none)"
            raise CommandError(f"no schedule named {name!r}{hint}", returncode=USAGE)
        run = run_schedule_inline(row)
        took = f"{(run.duration or 0) * 1000:.1f} ms"
        if run.status != RunStatus.SUCCEEDED:
            self.stderr.write(f"{name}: {run.status} after {took}: {run.error}")
            if run.traceback:
                self.stderr.write(run.traceback)
            # A snooze is not run again by hand: it did not succeed either.
            raise CommandError(f"{name} {run.status} (run {run.pk})", returncode=RUN_FAILED)
        self.stdout.write(f"{name}: {run.status} in {took} (run {run.pk})")

    # -- sync ------------------------------------------------------------------------
    def do_sync(self, **options: Any) -> None:
        result = sync_schedules(self.using)
        self.stdout.write(f"code-defined schedules: {result}")
        for label in ("created", "updated", "orphaned"):
            for name in getattr(result, label):
                self.stdout.write(f"  {label}: {name}")

    # -- status ----------------------------------------------------------------------
    def do_status(self, hours: float, **options: Any) -> None:
        if not hours > 0:
            raise CommandError(f"--hours must be > 0, got {hours}", returncode=USAGE)
        now = clock.now()
        self._status_nodes(now)
        self._status_tasks(now)
        self._status_schedules()
        self._status_failures(now, hours)
        self._status_pruning()

    def _status_nodes(self, now: datetime) -> None:
        """``htask status``'s nodes: how many are live, and the latest heard of."""
        all_nodes = Node.objects.using(self.using)
        nodes = list(all_nodes.heard_last()[:NODES_LISTED])
        live = all_nodes.live(get_settings().dead_before(now)).count()
        total = len(nodes) if len(nodes) < NODES_LISTED else all_nodes.count()
        self.stdout.write(f"nodes: {live} live, {total - live} dead or stopped")
        for node in nodes:
            age = (now - node.last_heartbeat).total_seconds()
            state = node_state(node, now)
            serves = "" if node.queues == "*" else f"  queues {node.queues or '(none)'}"
            stuck = f"  {node.stuck_threads} stuck threads" if node.stuck_threads else ""
            self.stdout.write(
                f"  {node.id}  {state}  heartbeat {age:.0f}s ago  pid {node.pid}  "
                f"v{node.version}{serves}{stuck}"
            )
        if total > len(nodes):
            self.stdout.write(f"  … and {total - len(nodes)} more (the admin's node list)")

    def _status_tasks(self, now: datetime) -> None:
        """``htask status``'s one-off tasks: by status, what holds the pending ones
        back, and the queues."""
        tasks = Task.objects.using(self.using)
        counts = tasks.by_status()
        overdue = tasks.overdue(now).count()
        for_others = tasks.filter(status=TaskStatus.WAITING).count()  # a range of an index
        self.stdout.write(
            f"tasks: {counts.get(TaskStatus.PENDING, 0)} pending ({overdue} overdue), "
            f"{counts.get(TaskStatus.RUNNING, 0)} running"
            + (f", {for_others} waiting for others" if for_others else "")
        )
        by_queue = (
            self.rows(Task)
            .filter(status=TaskStatus.PENDING)
            .values_list("queue_name")
            .annotate(n=Count("id"))
            .order_by("queue_name")
            .values_list("queue_name", "n")
        )
        waiting = waiting_on_gates(now, using=self.using)
        for kind, label in (
            ("lock", "waiting on locks"),
            ("limit", "waiting on max_running"),
            ("key", "waiting on max_running per key"),
            ("rate", "waiting on rate limits"),
        ):
            names = [f"{gate.name} {gate.count}" for gate in waiting if gate.kind == kind]
            if names:
                self.stdout.write(f"  {label}: {', '.join(names)}")
        self._status_queues([f"{name} {count}" for name, count in by_queue])

    def _status_schedules(self) -> None:
        """``htask status``'s schedules: how many are enabled, and the broken ones."""
        broken = list(self.rows(Schedule).exclude(broken="").order_by("name")[: SHOWN + 1])
        enabled = self.rows(Schedule).filter(enabled=True, broken="").count()
        self.stdout.write(f"schedules: {enabled} enabled, {len(broken)} broken")
        for row in broken[:SHOWN]:
            self.stdout.write(f"  {row.name}: broken: {row.broken}")
        if len(broken) > SHOWN:
            more = self.rows(Schedule).exclude(broken="").count() - SHOWN
            self.stdout.write(f"  … and {more} more (the admin's schedule list filters them)")

    def _status_failures(self, now: datetime, hours: float) -> None:
        """``htask status``'s runs that failed in the last ``hours``, the latest first."""
        # By start, the index of runs by outcome: by finish, the count read every
        # failed run the table holds.
        since = now - timedelta(hours=hours)
        failed = self.rows(Run).filter(status=RunStatus.FAILED, started_at__gte=since)
        count = failed.count()
        latest = f" (the {SHOWN} latest)" if count > SHOWN else ""
        self.stdout.write(f"failures in the last {hours:g}h: {count}{latest}")
        for run in failed.order_by("-started_at")[:SHOWN]:
            when = f"{run.finished_at:%Y-%m-%d %H:%M:%S}" if run.finished_at else "?"
            first = run.error.splitlines()[0] if run.error else ""
            self.stdout.write(f"  {when}  {run.name}: {first}")

    def _status_pruning(self) -> None:
        """The retention, and the last round of pruning a node recorded."""
        settings = get_settings()
        self.stdout.write(
            f"retention: finished tasks {settings.task_retention_days.describe()}, runs "
            f"{_days(settings.run_retention_days)}"
        )
        last = self.rows(Node).filter(pruned_at__isnull=False).order_by("-pruned_at").first()
        if last is not None and last.pruned_at is not None:
            self.stdout.write(
                f"  last pruned by {last.id} at {last.pruned_at:%Y-%m-%d %H:%M:%S}: "
                f"{last.pruned_tasks} tasks and {last.pruned_runs} runs since it started"
            )

    def _status_queues(self, pending: list[str]) -> None:
        """``htask status``'s lines of the queues: the pending tasks of each (when
        there is more than the default queue), the queues paused and limited."""
        if len(pending) > 1 or (pending and not pending[0].startswith(f"{DEFAULT_QUEUE} ")):
            self.stdout.write(f"  pending by queue: {', '.join(pending[:SHOWN])}")
        states = Queue.objects.using(self.using).states()
        if states:
            self.stdout.write(f"queues: {states} (htask queue list)")

    # -- prune -----------------------------------------------------------------------
    def do_prune(self, days: float | None, dry_run: bool, **options: Any) -> None:
        settings = get_settings()
        if days is None:
            kept = (
                f"tasks kept {settings.task_retention_days.describe()} "
                f"(TASK_RETENTION_DAYS), runs {_days(settings.run_retention_days)} "
                "(RUN_RETENTION_DAYS)"
            )
        else:
            kept = f"tasks and runs kept {days:g} days (--days)"

        shown = [0]  # rows when progress was last shown

        def progress(total: Pruned) -> None:
            if total.rows >= shown[0] + PROGRESS_ROWS:
                shown[0] = total.rows
                self.stdout.write(f"  … {_counts(total)} so far")

        try:
            pruned = prune_now(days=days, dry_run=dry_run, using=self.using, progress=progress)
        except ValueError as exc:
            raise CommandError(f"--days: {exc}", returncode=USAGE) from exc
        if pruned is None:
            self.stdout.write("a node is pruning now (one at a time): its log says what it deleted")
            return
        verb = "would delete" if dry_run else "deleted"
        self.stdout.write(f"{verb} {_counts(pruned)} past their retention: {kept}")

    # -- health ----------------------------------------------------------------------
    def do_health(self, node: str | None, max_late: object, **options: Any) -> None:
        try:
            seconds = parse_max_late(max_late, "--max-late")
            if node is not None:
                node = parse_node(node, "--node")
        except ValueError as exc:
            raise CommandError(str(exc), returncode=USAGE) from exc
        verdict = check_health(max_late=seconds, node=node, using=self.using)
        if not verdict.healthy:
            self.stderr.write(verdict.line())
            raise SystemExit(UNHEALTHY)  # one line, no "CommandError:" prefix (cf. --check)
        self.stdout.write(verdict.line())

    # -- retry -----------------------------------------------------------------------
    def do_retry(
        self,
        ids: list[int],
        failed_since: str | None,
        function: list[str],
        status: list[str],
        error: str,
        dry_run: bool,
        **options: Any,
    ) -> None:
        if bool(ids) == (failed_since is not None):
            raise CommandError("give task ids or --failed-since WHEN (not both)", returncode=USAGE)
        kinds = [Failure(kind) for kind in status]
        if failed_since is not None:
            ids = self._failed_since(failed_since, kinds, function, error)
            if not ids:
                return
        else:
            ids = self._named(ids, kinds, function, error)
        if dry_run:
            shown = ", ".join(map(str, ids)) or "none"
            self.stdout.write(f"would send again: {len(ids)} task(s) ({shown}); nothing sent")
            return
        result = send_again(ids, using=self.using)
        for pk, status_ in sorted(result.not_failed.items()):
            self.stderr.write(f"task {pk} is {status_}, not failed: left alone")
        for pk in result.superseded:
            self.stderr.write(
                f"task {pk}: a newer pending task has its key: cancelled, superseded by it"
            )
        for pk in result.followed:
            self.stderr.write(f"task {pk}: {FOLLOWED_NOT_SENT}: left alone")
        sent = ", ".join(map(str, result.sent)) or "none"
        self.stdout.write(f"sent again: {len(result.sent)} task(s) ({sent})")

    def _failed_since(
        self, since: str, kinds: list[Failure], functions: list[str], error: str
    ) -> list[int]:
        """The ids ``retry --failed-since`` sends (none: it said so)."""
        try:
            cutoff = since_time(since)
        except ValueError as exc:
            raise CommandError(f"--failed-since: {exc}", returncode=USAGE) from exc
        chosen = failed_tasks(
            cutoff, kinds=kinds or RETRIED, functions=functions, error=error, using=self.using
        )
        # A range of the ended tasks' index, sorted here: asked to sort by id, SQLite
        # would rather read the whole table in id order.
        ids = sorted(chosen.order_by().values_list("pk", flat=True))
        if not kinds:
            self._left_out(cutoff, functions, error)
        if not ids:
            self.stdout.write(
                f"no task failed since {cutoff:%Y-%m-%d %H:%M:%S %Z}{_filters(functions, error)}"
            )
        return ids

    def _named(
        self, ids: list[int], kinds: list[Failure], functions: list[str], error: str
    ) -> list[int]:
        """The ids among those named that ``retry ID…`` sends: all of them, or those the
        filters choose (it says which it leaves alone). An unknown id is an error."""
        known = set(self.rows(Task).filter(pk__in=ids).values_list("pk", flat=True))
        unknown = [pk for pk in ids if pk not in known]
        if unknown:
            raise CommandError(
                f"no task with id {', '.join(map(str, unknown))}: nothing sent",
                returncode=USAGE,
            )
        if not (kinds or functions or error):
            return ids
        named = failed_tasks(
            None, kinds=kinds or tuple(Failure), functions=functions, error=error, using=self.using
        )
        chosen = set(named.filter(pk__in=ids).values_list("pk", flat=True))
        for pk in sorted(set(ids) - chosen):
            self.stderr.write(f"task {pk}: not failed as the filters ask: left alone")
        return sorted(chosen)

    def _left_out(self, cutoff: datetime, functions: list[str], error: str) -> None:
        """Say how many tasks the default of ``--status`` left out, and how to send them."""
        for kind in Failure:
            if kind in RETRIED:
                continue
            count = failed_tasks(
                cutoff, kinds=[kind], functions=functions, error=error, using=self.using
            ).count()
            if count:
                self.stderr.write(
                    f"left out: {count} {kind.value} task(s) (--status {kind.value} to send them)"
                )

    # -- queue -----------------------------------------------------------------------
    def do_queue(self, queue_action: str, **options: Any) -> None:
        if queue_action == "list":
            self._list_queues(list_queues(using=self.using))
            return
        name = options["name"]
        try:
            if queue_action == "limit":
                limit = _limit_of(options["max_running"])
                changed = limit_queue(name, limit, using=self.using)
                said = f"limited to {limit} tasks running at once" if limit else "without a limit"
            elif queue_action == "pause":
                changed = pause_queue(name, using=self.using)
                said = "paused: none of its tasks starts, none of its schedules fires"
            else:
                changed = resume_queue(name, using=self.using)
                said = "running"
        except ValueError as exc:
            raise CommandError(str(exc), returncode=USAGE) from exc
        self.stdout.write(f"queue {name} {'now' if changed else 'already'} {said}")

    def _list_queues(self, queues: list[QueueInfo]) -> None:
        if not queues:
            self.stdout.write("no queue paused, limited, or with tasks pending or running")
            return
        rows = [("queue", "state", "limit", "pending", "running")]
        for q in queues:
            since = f" since {q.paused_at:%Y-%m-%d %H:%M:%S %Z}" if q.paused_at else ""
            state = f"paused{since}" if q.paused else "running"
            limit = "-" if q.max_running is None else str(q.max_running)
            rows.append((q.name, state, limit, str(q.pending), str(q.running)))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            line = "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True))
            self.stdout.write(line.rstrip())

    # -- import-celery-beat ----------------------------------------------------------
    def do_import_celery_beat(self, dry_run: bool, mapping: list[str], **options: Any) -> None:
        from django_htask.celery_beat import import_celery_beat, parse_map  # noqa: PLC0415

        try:
            report = import_celery_beat(parse_map(mapping), dry_run=dry_run, using=self.using)
        except ImportError as exc:
            raise CommandError(str(exc), returncode=USAGE) from exc
        except ValueError as exc:
            raise CommandError(str(exc), returncode=USAGE) from exc
        for item in report.items:
            self.stdout.write(item.line())
            for note in item.notes:
                self.stdout.write(f"    note: {note}")
            for note in item.not_carried:
                self.stdout.write(f"    not carried over: {note}")
        self.stdout.write(report.summary())


def _days(days: float) -> str:
    return "for ever" if not days else f"{days:g} days"


def _counts(pruned: Pruned) -> str:
    return (
        f"{pruned.tasks} finished tasks, {pruned.runs} runs and {pruned.nodes} rows of "
        "stopped nodes"
    )


def _add_prune_options(prune: CommandParser) -> None:
    """``htask prune``'s options."""
    prune.add_argument(
        "--days",
        type=float,
        default=None,
        help="keep this many days of tasks and runs (> 0; default: TASK_RETENTION_DAYS "
        "and RUN_RETENTION_DAYS)",
    )
    prune.add_argument("--dry-run", action="store_true", help="count what would go")


def _add_health_options(health: CommandParser) -> None:
    """``htask health``'s options."""
    health.add_argument("--node", default=None, metavar="ID", help="this node must be live")
    health.add_argument(
        "--max-late",
        default=DEFAULT_MAX_LATE,
        metavar="SECONDS",
        help=f"due work waiting longer is late ({DEFAULT_MAX_LATE:g})",
    )


def _add_celery_beat_options(beat: CommandParser) -> None:
    """``htask import-celery-beat``'s options."""
    beat.add_argument("--dry-run", action="store_true", help="show what, write nothing")
    beat.add_argument(
        "--map",
        dest="mapping",
        nargs="+",
        action="extend",
        default=[],
        metavar="CELERY_NAME=module:function",
        help="run this celery task name as this registered function",
    )


def _add_retry_options(retry: CommandParser) -> None:
    """``htask retry``'s arguments: the tasks by id, or by when and how they failed."""
    retry.add_argument("ids", nargs="*", type=int, metavar="ID", help="the tasks' ids")
    retry.add_argument(
        "--failed-since",
        default=None,
        metavar="WHEN",
        help="the tasks failed since WHEN: a duration back (2h, 1d) or ISO 8601",
    )
    retry.add_argument(
        "--function",
        action="append",
        default=[],
        metavar="NAME",
        help="only the tasks of this registered function (again for more)",
    )
    retry.add_argument(
        "--status",
        action="append",
        default=[],
        choices=[kind.value for kind in Failure],
        help="only the tasks whose last attempt ended so (again for more); with "
        f"--failed-since the default is {' and '.join(RETRIED)}: a timed-out or "
        "aborted task is sent again only when asked for, or named by its id",
    )
    retry.add_argument(
        "--error", default="", metavar="TEXT", help="only the tasks whose error has TEXT"
    )
    retry.add_argument(
        "--dry-run", action="store_true", help="list what would be sent, send nothing"
    )


def _add_queue_actions(queue: CommandParser) -> None:
    """``htask queue``'s own actions."""
    acts = queue.add_subparsers(dest="queue_action", required=True, metavar="QUEUE_ACTION")
    for name, text in (
        ("pause", "start none of its tasks nor schedules, on every node"),
        ("resume", "run its tasks and schedules again"),
    ):
        acts.add_parser(name, help=text).add_argument("name", help="the queue's name")
    limit = acts.add_parser("limit", help="at most N of its tasks running at once")
    limit.add_argument("name", help="the queue's name")
    limit.add_argument("max_running", metavar="N|none", help="the limit, or none")
    acts.add_parser("list", help="the queues: paused, limit, pending, running")


def _limit_of(text: str) -> int | None:
    """``htask queue limit``'s N: a whole number, or ``none`` (no limit)."""
    if text.strip().lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"the limit must be a whole number or 'none', got {text!r}") from None
