"""The scheduler in the Django admin.

Schedules (:mod:`.schedules`)
    the list shows each schedule in words (``describe``), its zone, next and last run
    and status; the form (:mod:`.forms`) offers the registered functions, validates the
    schedule text with the parser's own message and the arguments (JSON) against the
    function's signature, and previews the next five runs (:mod:`.preview`) in the
    schedule's zone and in UTC: the ones the scheduler will fire once the form is saved
    (unchanged, from the stored ``next_run_at``; edited, from the time of the save).
    Code-defined schedules are read-only except ``enabled``. Actions: run now, enable,
    disable.
Runs (:mod:`.runs`)
    read-only, with status, duration, node, error and traceback.
    Each schedule's last 20 runs are a strip of coloured marks linking to the runs
    (:mod:`.strip`: a column of the list, read for the whole page in one query, and on
    its page).
Tasks (:mod:`.tasks`)
    status, due time, attempts, last error; a pending task's time can be changed;
    its batch, what it runs after and what runs after it, and why a waiting task
    waits (:mod:`.compose`); actions: cancel, send again (failed ones).
Batches (:mod:`.compose`)
    read-only: the counts of members by how they ended, the members left by status
    (links to the task list of the batch), the callbacks and their tasks.
Nodes (:mod:`.nodes`)
    live or dead from the heartbeat, with the work each holds.
Queues (:mod:`.queues`)
    paused or running, the limit (edited in the list), the tasks pending and running;
    actions: pause, resume.
Scheduler overview (:mod:`.overview`)
    one page (:class:`OverviewAdmin`, on the proxy model ``Overview``): the nodes, the
    last 24 hours and the next 24 hours, drawn as inline SVG
    (:mod:`django_htask.admin.overview.charts`) from
    :func:`django_htask.admin.overview.data.read_overview`.

Every state-changing action is an admin action (a POST with the CSRF token) that
needs the model's *change* permission.

Importing this package (``django.contrib.admin``'s autodiscovery does) registers the
ModelAdmins, each module its own, where ``django.contrib.admin`` is installed: a
project without the admin still imports the package, through ``django_htask.overview``
(``htask status`` reads its tasks waiting from :mod:`.overview.data`), and registers
nothing then (the admin's site does not exist without its app).
"""

from __future__ import annotations

from django.apps import apps

from .forms import ScheduleForm, TaskForm
from .overview.layout import can_view_overview

if apps.is_installed("django.contrib.admin"):
    from .compose import BatchAdmin
    from .nodes import NodeAdmin
    from .overview.views import OverviewAdmin
    from .queues import QueueAdmin
    from .runs import RunAdmin
    from .schedules import ScheduleAdmin
    from .tasks import TaskAdmin

__all__ = [
    "BatchAdmin",
    "NodeAdmin",
    "OverviewAdmin",
    "QueueAdmin",
    "RunAdmin",
    "ScheduleAdmin",
    "ScheduleForm",
    "TaskAdmin",
    "TaskForm",
    "can_view_overview",
]
