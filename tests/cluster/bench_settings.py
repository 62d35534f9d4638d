"""``bench/cluster.py``: the cluster settings plus django-tasks' database backend."""

from tests.cluster.settings import *  # noqa: F403
from tests.cluster.settings import HTASK, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks", "django_tasks_db"]
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
HTASK = {**HTASK, "POLL_INTERVAL": 1.0}
LOGGING = {"version": 1, "disable_existing_loggers": False}
