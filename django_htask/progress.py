"""``set_progress``: what a one-off task reports while it runs, kept on its row for
``get_result`` / ``wait_result`` and the admin's task page::

    from django_htask import set_progress, task

    @task
    def import_rows(path: str) -> int:
        rows = read(path)
        for done, row in enumerate(rows, 1):
            save(row)
            if done % 100 == 0:
                set_progress({"done": done, "of": len(rows)})
        return len(rows)
"""

from __future__ import annotations

import json
from typing import Any

from asgiref.sync import sync_to_async

from .current import current_task_id
from .db import scheduler_alias
from .models import Task, TaskStatus

__all__ = ["PROGRESS_MAX_BYTES", "aset_progress", "set_progress"]

#: The largest progress kept, as JSON text (a report, not a result: results have
#: ``RESULT_MAX_BYTES``).
PROGRESS_MAX_BYTES = 65_536


def set_progress(value: Any) -> bool:
    """From inside a one-off task's run: keep ``value`` on the task's row, in place of
    what it reported before; ``get_result(token).progress`` reads it from any process.

    ``value`` is anything JSON holds (a number, a string, a list, a dict of them, None),
    at most :data:`PROGRESS_MAX_BYTES` as JSON: ``ValueError`` naming it otherwise.
    Written at once, in a transaction of its own (a statement: the task's row only,
    while it runs), so call it every few seconds, not for every item of a loop.
    Returns whether it was written: False when the task no longer runs on this node's
    behalf (its node was declared dead, or it was aborted and stopped meanwhile).
    ``RuntimeError`` outside a task's function (a schedule's run has no task row)."""
    task_id = current_task_id()
    if task_id is None:
        raise RuntimeError(
            "set_progress() is for the function of a one-off task while it runs (a "
            "schedule's run keeps no progress)"
        )
    try:
        size = len(json.dumps(value, allow_nan=False).encode())
    except (TypeError, ValueError) as exc:
        raise ValueError(f"set_progress() takes what JSON holds, got {value!r}: {exc}") from exc
    if size > PROGRESS_MAX_BYTES:
        raise ValueError(
            f"set_progress() takes at most {PROGRESS_MAX_BYTES} bytes of JSON, got {size}"
        )
    rows = Task.objects.using(scheduler_alias()).filter(pk=task_id, status=TaskStatus.RUNNING)
    return rows.update(progress=value) == 1


async def aset_progress(value: Any) -> bool:
    """:func:`set_progress` from an ``async def`` task."""
    return await sync_to_async(set_progress, thread_sensitive=False)(value)
