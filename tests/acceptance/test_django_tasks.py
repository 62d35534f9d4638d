"""The django.tasks backend as a site uses it (Django >= 6.0): the web process
enqueues, a ``runscheduler`` process runs the task, the web process reads the result.

Each ``django_code`` call is a fresh process, as two requests of a site may be: the
one reading a result has imported none of the task modules.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip(
    "django.tasks",
    reason="django.tasks needs Django >= 6.0; `make compat` runs these on Django 6.0/6.1",
)

from .conftest import Scheduler, wait_until

pytestmark = pytest.mark.slow

Query = Callable[..., list[tuple[Any, ...]]]
DjangoCode = Callable[[str], str]

READ_RESULTS = """
import json
from django.tasks import default_task_backend
out = []
for result_id in json.loads({ids!r}):
    r = default_task_backend.get_result(result_id)
    out.append({{
        "status": r.status,
        "value": r.return_value if r.status == "SUCCESSFUL" else None,
        "errors": [[e.exception_class_path, e.traceback.splitlines()[-1]] for e in r.errors],
        "workers": r.worker_ids,
        "priority": r.task.priority,
        "path": r.task.module_path,
    }})
print(json.dumps(out))
"""


def enqueue(django_code: DjangoCode, module: str, *calls: str) -> list[str]:
    """Enqueue ``calls`` (``"task.enqueue(...)"`` texts) from ``module``; their ids."""
    code = f"import json\nimport {module} as m\nprint(json.dumps([{', '.join(calls)}]))\n"
    ids: list[str] = json.loads(django_code(code))
    return ids


def read_results(
    django_code: DjangoCode, ids: list[str], imports: str = ""
) -> list[dict[str, Any]]:
    """The results of ``ids`` read by a process that imported only ``imports``."""
    code = imports + READ_RESULTS.format(ids=json.dumps(ids))
    results: list[dict[str, Any]] = json.loads(django_code(code))
    return results


def wait_finished(query: Query, count: int) -> None:
    wait_until(
        lambda: (
            query("SELECT count(*) FROM django_htask_task WHERE status IN ('succeeded', 'failed')")[
                0
            ][0]
            == count
        ),
        15,
        f"{count} finished tasks",
    )


@pytest.mark.parametrize("checks", [[], ["--skip-checks"]], ids=["checks", "skip-checks"])
def test_a_django_task_enqueued_by_the_web_process_runs_in_runscheduler(
    start_scheduler: Callable[..., Scheduler],
    django_code: DjangoCode,
    query: Query,
    checks: list[str],
) -> None:
    # --skip-checks: Django's check of TASKS is what imported the backend before; the
    # runner must be registered without it. jobs is no app's tasks module: runscheduler
    # imports it when it runs one of its tasks.
    scheduler = start_scheduler("--poll-interval", "0.2", "--node-id", "web-tasks", *checks)
    ids = enqueue(
        django_code,
        "tests.acceptance.app.jobs",
        "m.greet.enqueue('ada').id",
        "m.explode.enqueue('nope').id",
        "m.leave.enqueue(3).id",
    )
    wait_finished(query, 3)
    greet, explode, leave = read_results(django_code, ids)
    assert greet == {
        "status": "SUCCESSFUL",
        "value": {"greeting": "hello ada", "attempt": 1},
        "errors": [],
        "workers": ["web-tasks"],
        "priority": 5,
        "path": "tests.acceptance.app.jobs.greet",
    }
    assert (explode["status"], explode["errors"]) == (
        "FAILED",
        [["builtins.LookupError", "LookupError: nope"]],
    )
    # SystemExit in a task fails that task, not the scheduler.
    assert (leave["status"], leave["errors"]) == (
        "FAILED",
        [["builtins.SystemExit", "SystemExit: 3"]],
    )
    assert scheduler.process.poll() is None, scheduler.stderr
    scheduler.send(signal.SIGTERM)
    assert scheduler.wait_exit() == 0, scheduler.stderr


def test_a_django_task_outside_the_installed_apps_runs_only_when_listed(
    start_scheduler: Callable[..., Scheduler], django_code: DjangoCode, query: Query
) -> None:
    module = "tests.acceptance.extra_jobs"
    scheduler = start_scheduler("--poll-interval", "0.2")
    [refused] = enqueue(django_code, module, "m.shout.enqueue('hi').id")
    wait_finished(query, 1)
    scheduler.send(signal.SIGTERM)
    assert scheduler.wait_exit() == 0, scheduler.stderr
    [(error,)] = query("SELECT error FROM django_htask_run")
    assert f"add {module!r} to HTASK['DJANGO_TASK_MODULES']" in error, error
    assert query("SELECT status FROM django_htask_task WHERE token = ?", refused) == [("failed",)]

    start_scheduler("--poll-interval", "0.2", HTASK_ACCEPTANCE_TASK_MODULES=module)
    [listed] = enqueue(django_code, module, "m.shout.enqueue('hi').id")
    wait_finished(query, 2)
    # The web process is not given the setting: it reads the result of a task it imports.
    [got] = read_results(django_code, [listed], imports=f"import {module}\n")
    assert (got["status"], got["value"]) == ("SUCCESSFUL", "HI")
