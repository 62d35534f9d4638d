"""``@task`` and ``@periodic``: register functions, declare code-defined schedules.

::

    from django_htask import periodic, task

    @task
    def send_reminder(reminder_id: int) -> None: ...

    @periodic("@every 5m")
    def refresh_feeds() -> None: ...

    @periodic("30 4 * * *", tz="Asia/Tokyo", overlap="skip", max_attempts=3)
    def nightly_report() -> None: ...

Both decorators return the function unchanged. ``@task`` and what it declares per
function live in :mod:`django_htask.functions`; ``@periodic``, the declarations and
:func:`sync_schedules` in :mod:`django_htask.code_schedules`. This module names them
together, at the path the docs and ``runscheduler`` use.
"""

from __future__ import annotations

from .code_schedules import (
    BadDeclaration,
    PeriodicSpec,
    SyncResult,
    bad_declarations,
    declared_schedules,
    periodic,
    sync_schedules,
)
from .functions import (
    check_max_running,
    check_policy,
    check_timeout,
    function_name,
    task,
    task_lock,
    task_max_running,
    task_policy,
    task_timeout,
)

__all__ = [
    "BadDeclaration",
    "PeriodicSpec",
    "SyncResult",
    "bad_declarations",
    "check_max_running",
    "check_policy",
    "check_timeout",
    "declared_schedules",
    "function_name",
    "periodic",
    "sync_schedules",
    "task",
    "task_lock",
    "task_max_running",
    "task_policy",
    "task_timeout",
]
