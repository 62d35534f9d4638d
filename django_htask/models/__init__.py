"""The scheduler's tables: schedules, one-off tasks, runs, nodes and queues.

The database is the source of truth. A :class:`Schedule` keeps its ``next_run_at``
current on every save and every fire, so a node loads it without evaluating any cron.
Its ``version`` is set by the database itself (a trigger, see ``store/sqlite.py``) from
one counter that only grows, on every insert and update, including
``QuerySet.update()`` and raw SQL: a node reads only the rows whose version is above
the last one it saw.

One module per model family: :mod:`~django_htask.models.schedule`,
:mod:`~django_htask.models.task`, :mod:`~django_htask.models.run`,
:mod:`~django_htask.models.node`, :mod:`~django_htask.models.queue`,
:mod:`~django_htask.models.rate` and :mod:`~django_htask.models.compose` (batches and
dependencies); the columns
they share (ranges, validators, the public token) in :mod:`~django_htask.models.fields`
and their manager in :mod:`~django_htask.models.managers`. Django finds every model
here, in the app's ``models`` module, and so do the migrations (``django_htask.models.InRange``...).
"""

from __future__ import annotations

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured

from django_htask.enums import (
    CatchUp,
    Origin,
    Overlap,
    RetryJitter,
    RetryKind,
    RunStatus,
    TaskStatus,
)

__all__ = [
    "GRACE_MAX",
    "GRACE_RANGE",
    "MAX_ATTEMPTS_MAX",
    "MAX_ATTEMPTS_RANGE",
    "MAX_RUNNING_MAX",
    "MAX_RUNNING_RANGE",
    "MAX_SNOOZES_MAX",
    "MAX_SNOOZES_RANGE",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "PRIORITY_RANGE",
    "RETRY_BACKOFF_MAX",
    "RETRY_BACKOFF_RANGE",
    "RETRY_CAP_MAX",
    "RETRY_CAP_RANGE",
    "TIMEOUT_MAX",
    "TIMEOUT_MIN",
    "TIMEOUT_RANGE",
    "Batch",
    "CatchUp",
    "Dependency",
    "InRange",
    "Node",
    "Origin",
    "Overlap",
    "Overview",
    "Queue",
    "RateSlot",
    "RetryJitter",
    "RetryKind",
    "Run",
    "RunStatus",
    "Schedule",
    "Task",
    "TaskStatus",
    "new_token",
]

# Django's own error for the models of an app that is not installed names neither the
# app nor the fix; importing the decorators, the api or a task module ends here first.
if apps.apps_ready and not apps.is_installed("django_htask"):
    raise ImproperlyConfigured(
        "django_htask is imported but is not in INSTALLED_APPS: add 'django_htask' to "
        "INSTALLED_APPS (then run `manage.py migrate`)"
    )

from .compose import Batch, Dependency
from .fields import (
    GRACE_MAX,
    GRACE_RANGE,
    MAX_ATTEMPTS_MAX,
    MAX_ATTEMPTS_RANGE,
    MAX_RUNNING_MAX,
    MAX_RUNNING_RANGE,
    MAX_SNOOZES_MAX,
    MAX_SNOOZES_RANGE,
    PRIORITY_MAX,
    PRIORITY_MIN,
    PRIORITY_RANGE,
    RETRY_BACKOFF_MAX,
    RETRY_BACKOFF_RANGE,
    RETRY_CAP_MAX,
    RETRY_CAP_RANGE,
    TIMEOUT_MAX,
    TIMEOUT_MIN,
    TIMEOUT_RANGE,
    InRange,
    new_token,
)
from .fields import ExceptionNames as ExceptionNames
from .managers import SchedulerManager as SchedulerManager
from .node import Node, Overview
from .queue import Queue
from .rate import RATE_SLOT_INDEX as RATE_SLOT_INDEX
from .rate import RateSlot
from .run import Run
from .schedule import Schedule
from .task import BATCH_INDEX as BATCH_INDEX
from .task import CLAIM_INDEX as CLAIM_INDEX
from .task import DUE_INDEX as DUE_INDEX
from .task import ENDED_INDEX as ENDED_INDEX
from .task import GATED as GATED
from .task import GATED_INDEX as GATED_INDEX
from .task import GATED_PREDICATE as GATED_PREDICATE
from .task import HOLDER_INDEX as HOLDER_INDEX
from .task import KEY_INDEX as KEY_INDEX
from .task import KEY_PREDICATE as KEY_PREDICATE
from .task import NOT_ENDED as NOT_ENDED
from .task import PRUNE_INDEX as PRUNE_INDEX
from .task import Task
