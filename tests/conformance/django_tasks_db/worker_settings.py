"""Settings of the ``runscheduler`` subprocesses of ``test_worker_process.py``: the test
suite's settings (``tests.settings``, SQLite or PostgreSQL) on the test database the
test process uses, whose name comes in ``HTASK_DTDB_DATABASE`` (django-tasks-db's
``tests/db_worker_test_settings.py`` does the same for ``db_worker``).

Three changes: django-celery-beat is left out of ``INSTALLED_APPS`` (only
``tests/integration/test_celery_beat.py`` reads its tables, and loading its models was
a third of a worker's start, which these tests bound to seconds as django-tasks-db's
do); the tasks module of the port is listed in ``DJANGO_TASK_MODULES`` (it
belongs to no installed app, and a node imports a Django task's module only then), and
the ``django.tasks`` logger writes to stderr at INFO, as ``db_worker --verbosity 3``
makes it do: its lines name each task's result id when it starts and ends.
"""

import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, HTASK, INSTALLED_APPS

INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "django_celery_beat"]

DATABASES["default"]["NAME"] = os.environ["HTASK_DTDB_DATABASE"]
HTASK = {**HTASK, "DJANGO_TASK_MODULES": ["tests.conformance.django_tasks_db.tasks"]}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"django.tasks": {"handlers": ["stderr"], "level": "INFO"}},
}
