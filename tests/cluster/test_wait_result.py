"""``wait_result`` on PostgreSQL, as a web process uses it: a ``runscheduler`` process
runs the task, another process waits, woken by the ``NOTIFY`` of the task's end: two
reads of the task, the one before its end and the one the notice wakes (``poll`` is
60 s; without the notice, reads would come 10 ms apart, then less and less often)."""

from __future__ import annotations

import pytest

from tests.cluster.conftest import Site

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SLOW = "tests.cluster.clusterapp.tasks:slow"


def test_a_web_process_is_woken_by_the_end_a_node_writes(site: Site) -> None:
    site.node("--workers", "2")
    out = site.django(
        "import asyncio, time\n"
        "from django_htask import await_result, schedule, scheduled, wait_result\n"
        "reads = []\n"
        "read = scheduled.get_result\n"
        "scheduled.get_result = lambda token: reads.append(token) or read(token)\n"
        f"first = schedule({SLOW!r}, 1, 0.5)\n"
        "t0 = time.monotonic()\n"
        "result = wait_result(first.token, timeout=20, poll=60)\n"
        "print(result.status, time.monotonic() - t0 >= 0.5, len(reads))\n"
        f"second = schedule({SLOW!r}, 2, 0.3)\n"
        "print(asyncio.run(await_result(second.token, timeout=20, poll=60)).status)\n"
    )
    assert out.split() == ["succeeded", "True", "2", "succeeded"]
    assert site.sql("SELECT count(*) FROM django_htask_task WHERE waited") == [(2,)]
