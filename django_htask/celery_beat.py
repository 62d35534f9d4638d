"""Import django-celery-beat's periodic tasks as django-htask schedules.

``manage.py htask import-celery-beat`` reads django-celery-beat's tables through its
own models (``PeriodicTask`` with its ``CrontabSchedule``, ``IntervalSchedule``,
``ClockedSchedule`` or ``SolarSchedule``) and creates one :class:`Schedule` per
periodic task, named as the task is. What each field becomes:

=========================  ============================================================
django-celery-beat         django-htask
=========================  ============================================================
``name``                   ``Schedule.name`` (the key: a second import creates nothing)
``task``                   ``function``: the same name if registered, its dotted form
                           ``a.b.f`` as ``a.b:f``, or ``--map task=module:function``
crontab and its timezone   the cron text and ``timezone``
interval                   ``@every`` (microseconds: whole milliseconds only)
clocked                    ``@once`` at that time
solar                      ``@solar EVENT LAT LON``
``args``, ``kwargs``       the call, checked against the function's signature
``enabled``                ``enabled``
``description``            ``description``
``one_off``                ``@once`` at the schedule's first occurrence
``start_time``             ``FROM=`` (a clocked one runs at the later of the two)
``expires``                ``UNTIL=`` (a clocked one: ``grace`` up to it)
``expire_seconds``         ``grace`` (an occurrence later than that is missed)
=========================  ============================================================

Anything else set on a periodic task (``queue``, ``exchange``, ``routing_key``,
``headers``, ``priority``) has no equivalent; each import lists it
for the task it was set on, with the reason. A task that cannot be carried over at
all (an unknown function, arguments that do not fit, a schedule we cannot express)
is skipped and listed with the reason; nothing is dropped silently.

django-celery-beat is imported only by :func:`import_celery_beat`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.apps import apps
from django.db import router, transaction

from django_htask import clock
from django_htask.db import scheduler_alias
from django_htask.engine import CALL_ERRORS, InvalidSchedule, parse_schedule, registry
from django_htask.engine.schedules import format_duration
from django_htask.models import GRACE_MAX, Origin, Schedule

__all__ = [
    "CREATED",
    "DIFFERS",
    "SKIPPED",
    "UNCHANGED",
    "WOULD_CREATE",
    "ImportReport",
    "Imported",
    "import_celery_beat",
    "parse_map",
    "resolve_function",
]

CREATED = "created"
WOULD_CREATE = "would create"
UNCHANGED = "exists, unchanged"
DIFFERS = "exists, differs (left as it is)"
SKIPPED = "skipped"

_PERIOD_SECONDS = {
    "days": 86400.0,
    "hours": 3600.0,
    "minutes": 60.0,
    "seconds": 1.0,
    "microseconds": 1e-6,
}
#: The fields compared to tell "exists, unchanged" from "exists, differs".
_COMPARED = ("function", "schedule", "timezone", "enabled", "grace", "payload")


@dataclass(frozen=True)
class Imported:
    """What became of one periodic task."""

    name: str
    outcome: str  #: CREATED, WOULD_CREATE, UNCHANGED, DIFFERS or SKIPPED
    function: str = ""
    schedule: str = ""
    timezone: str = ""
    #: Why it was skipped (SKIPPED), or which fields differ (DIFFERS).
    reason: str = ""
    #: What was set on the periodic task and is not carried over, each with the reason.
    not_carried: tuple[str, ...] = ()
    #: What is carried over with a different meaning, or will not run, each said.
    notes: tuple[str, ...] = ()

    def line(self) -> str:
        """``name: outcome: …`` for the command's output."""
        if self.outcome == SKIPPED:
            return f"{self.name}: {SKIPPED}: {self.reason}"
        zone = f" ({self.timezone})" if self.timezone and self.timezone != "UTC" else ""
        text = f"{self.name}: {self.outcome}: {self.schedule}{zone}, runs {self.function}"
        if self.outcome == DIFFERS:
            text += f"; differs in {self.reason}"
        return text


@dataclass
class ImportReport:
    """Every periodic task read, in name order, and what became of it."""

    items: list[Imported] = field(default_factory=list)
    dry_run: bool = False

    def count(self, outcome: str) -> int:
        return sum(1 for item in self.items if item.outcome == outcome)

    def summary(self) -> str:
        order = (WOULD_CREATE, CREATED, UNCHANGED, DIFFERS, SKIPPED)
        parts = [f"{self.count(o)} {o}" for o in order if self.count(o)]
        text = ", ".join(parts) or "no periodic tasks"
        return f"{text} (dry run: nothing written)" if self.dry_run else text


def parse_map(entries: Iterable[str]) -> dict[str, str]:
    """``["celery.name=module:function", …]`` as a dict; ValueError naming a bad entry
    or a target that is not a registered function."""
    mapping: dict[str, str] = {}
    for entry in entries:
        source, eq, target = entry.partition("=")
        source, target = source.strip(), target.strip()
        if not eq or not source or not target:
            raise ValueError(f"--map {entry!r}: expected celery.task.name=module:function")
        found = _registered(target)
        if found is None:
            raise ValueError(
                f"--map {entry!r}: {target!r} is not a registered function "
                "(decorate it with @task, in a module every process imports)"
            )
        mapping[source] = found
    return mapping


def _registered(name: str) -> str | None:
    """``name`` if registered, else its dotted form ``a.b.f`` read as ``a.b:f``."""
    if name in registry:
        return name
    module, dot, function = name.rpartition(".")
    if dot and ":" not in name and f"{module}:{function}" in registry:
        return f"{module}:{function}"
    return None


def resolve_function(task: str, mapping: Mapping[str, str]) -> str | None:
    """The registered function a celery task name maps to, or None."""
    if task in mapping:
        return mapping[task]
    return _registered(task)


def import_celery_beat(
    mapping: Mapping[str, str] | None = None, *, dry_run: bool = False, using: str | None = None
) -> ImportReport:
    """Create a :class:`Schedule` for each of django-celery-beat's periodic tasks, in
    the database ``using`` (default: the scheduler's); they are read from the database
    the routers give django-celery-beat.

    ``mapping`` maps celery task names to registered functions (see
    :func:`parse_map`). A task whose name is already a schedule's is left as it is.
    With ``dry_run`` nothing is written. Raises ImportError, saying what to do, when
    django-celery-beat is not installed or not in ``INSTALLED_APPS``.
    """
    periodic_task = _periodic_task_model()
    report = ImportReport(dry_run=dry_run)
    using = using or scheduler_alias()
    rows = (
        periodic_task.objects.using(router.db_for_read(periodic_task))
        .select_related("crontab", "interval", "clocked", "solar")
        .order_by("name")
    )
    now = clock.now()
    with transaction.atomic(using=using):
        existing = {s.name: s for s in Schedule.objects.using(using).all()}
        for task in rows:
            item = _import_one(task, mapping or {}, existing, now, dry_run, using)
            report.items.append(item)
    return report


def _periodic_task_model() -> Any:
    try:
        import django_celery_beat  # noqa: F401, PLC0415
    except ImportError:
        raise ImportError(
            "django-celery-beat is not installed: the import reads its tables through "
            "its models (pip install django-celery-beat)"
        ) from None
    if not apps.is_installed("django_celery_beat"):
        raise ImportError(
            "django_celery_beat is not in INSTALLED_APPS: add it while you import "
            "(its tables are read through its models)"
        )
    from django_celery_beat.models import PeriodicTask  # noqa: PLC0415

    return PeriodicTask


class _Skip(Exception):
    """This periodic task cannot be carried over (the message says why)."""


def _import_one(
    task: Any,
    mapping: Mapping[str, str],
    existing: dict[str, Schedule],
    now: datetime,
    dry_run: bool,
    using: str,
) -> Imported:
    name = str(task.name)
    try:
        function = resolve_function(task.task, mapping)
        if function is None:
            raise _Skip(
                f"task {task.task!r} is not a registered function; register it with @task "
                f"or map it: --map {task.task}=module:function"
            )
        spec, zone, grace, notes = _schedule_of(task, now)
        args, kwargs = _call_of(task)
        row = Schedule(
            name=name,
            description=str(task.description or "").strip(),
            function=function,
            schedule=spec,
            timezone=zone,
            enabled=bool(task.enabled),
            grace=grace,
            origin=Origin.ADMIN,
        )
        try:
            row.set_call(args, kwargs)
        except CALL_ERRORS as exc:
            raise _Skip(f"its arguments do not fit {function}: {exc}") from None
        try:
            parse_schedule(spec, zone)
        except InvalidSchedule as exc:
            raise _Skip(f"schedule {spec!r} cannot be read: {exc}") from None
        limit = Schedule._meta.get_field("schedule").max_length or 0
        if len(spec) > limit:
            raise _Skip(f"schedule {spec!r} is longer than {limit} characters")
    except _Skip as exc:
        reason = str(exc)
        if name in existing:
            reason += "; the schedule of that name is left as it is"
        return Imported(name, SKIPPED, reason=reason)
    lost = tuple(_not_carried(task))
    found = existing.get(name)
    if found is not None:
        differ = ", ".join(f for f in _COMPARED if _value(found, f) != _value(row, f))
        outcome = DIFFERS if differ else UNCHANGED
        return Imported(name, outcome, function, spec, zone, differ, lost, tuple(notes))
    if not dry_run:
        row.save(using=using)
        existing[name] = row
    outcome = WOULD_CREATE if dry_run else CREATED
    return Imported(name, outcome, function, spec, zone, "", lost, tuple(notes))


def _value(row: Schedule, name: str) -> object:
    value = getattr(row, name)
    return bytes(value) if name == "payload" else value


def _call_of(task: Any) -> tuple[list[Any], dict[str, Any]]:
    try:
        args = json.loads(task.args or "[]")
        kwargs = json.loads(task.kwargs or "{}")
    except ValueError as exc:
        raise _Skip(f"its args or kwargs are not JSON: {exc}") from None
    if not isinstance(args, list):
        raise _Skip(f"its args are not a JSON list: {task.args!r}")
    if not isinstance(kwargs, dict):
        raise _Skip(f"its kwargs are not a JSON object: {task.kwargs!r}")
    return args, kwargs


def _schedule_of(task: Any, now: datetime) -> tuple[str, str, float | None, list[str]]:
    """The schedule text, its zone, the grace, and notes on what changed meaning."""
    notes: list[str] = []
    grace: float | None = None
    if task.expire_seconds is not None:
        grace = min(float(task.expire_seconds), GRACE_MAX)
        notes.append(
            f"expire_seconds={task.expire_seconds} became grace: an occurrence more than "
            "that late is missed, not run (celery counted from the message being sent)"
        )
    kinds = [k for k in ("crontab", "interval", "clocked", "solar") if getattr(task, k)]
    if len(kinds) != 1:
        raise _Skip(f"it has {len(kinds)} schedules ({', '.join(kinds) or 'none'}); expected one")
    kind = kinds[0]
    if kind == "clocked":
        at = task.clocked.clocked_time
        if task.start_time is not None and task.start_time > at:
            at = task.start_time  # celery-beat holds it until its start time
        if task.expires is not None:
            if task.expires <= at:
                raise _Skip("it expires before its clocked time: celery-beat never runs it")
            grace = min((task.expires - at).total_seconds(), GRACE_MAX)
        if task.enabled and at <= now:
            notes.append(f"its time {at.isoformat()} has passed: it will not run")
        return f"@once {at.isoformat()}", "UTC", grace, notes
    bounds = ""
    if task.start_time is not None:
        bounds += f"FROM={task.start_time.isoformat()} "
    if task.expires is not None:
        bounds += f"UNTIL={task.expires.isoformat()} "
    zone = "UTC"
    if kind == "crontab":
        spec, zone = _crontab(task.crontab)
    elif kind == "interval":
        spec = _interval(task.interval)
    else:
        solar = task.solar
        spec = f"@solar {solar.event} {_number(solar.latitude)} {_number(solar.longitude)}"
    text = bounds + spec
    if task.one_off:
        try:
            first = parse_schedule(text, zone).next_after(now)
        except InvalidSchedule as exc:
            raise _Skip(f"schedule {text!r} cannot be read: {exc}") from None
        if first is None:
            raise _Skip(f"one-off on {text!r}, which has no occurrence after now")
        notes.append(f"one_off: runs once, at the first occurrence of {text!r}")
        return f"@once {first.isoformat()}", "UTC", grace, notes
    return text, zone, grace, notes


def _crontab(crontab: Any) -> tuple[str, str]:
    fields = [
        str(getattr(crontab, name) or "*").replace(" ", "") or "*"
        for name in ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
    ]
    if fields[2] != "*" and fields[4] != "*":
        raise _Skip(
            f"crontab {' '.join(fields)!r} restricts both day_of_month and day_of_week: "
            "celery runs it on days that match both, cron on days that match either; "
            "split it into schedules that each restrict one"
        )
    zone = getattr(crontab.timezone, "key", None) or str(crontab.timezone or "UTC")
    return " ".join(fields), zone


def _interval(interval: Any) -> str:
    seconds = interval.every * _PERIOD_SECONDS[interval.period]
    if interval.period == "microseconds" and interval.every % 1000:
        raise _Skip(f"every {interval.every} microseconds: intervals are whole milliseconds")
    if seconds <= 0:
        raise _Skip(f"every {interval.every} {interval.period}: not more than zero")
    return f"@every {format_duration(seconds)}"


def _number(value: Any) -> str:
    text = repr(float(value))
    return text.removesuffix(".0")


def _not_carried(task: Any) -> list[str]:
    notes = []
    if task.queue:
        notes.append(
            f"queue {task.queue!r}: a django-htask queue picks the nodes that fire a "
            "schedule (runscheduler --queue); set queue_name if you run nodes for it"
        )
    if task.exchange:
        notes.append(f"exchange {task.exchange!r}: AMQP routing, no equivalent")
    if task.routing_key:
        notes.append(f"routing_key {task.routing_key!r}: AMQP routing, no equivalent")
    headers = (task.headers or "").strip()
    if headers and headers not in ("{}", "null"):
        notes.append(f"headers {headers}: message headers, no equivalent")
    if task.priority is not None:
        notes.append(
            f"priority {task.priority}: a broker's message priority; a schedule has none "
            "(its runs start when due)"
        )
    return notes
