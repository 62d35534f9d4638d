"""``bench/cluster.py``'s peers: the bench settings with only the apps of the peer
named by ``HTASK_BENCH_PEER`` (so no process imports another engine), persistent
database connections as their docs advise, and django-q2's cluster. ``all`` installs
every engine's apps, for ``migrate``."""

import os

from tests.cluster.bench_settings import *  # noqa: F403
from tests.cluster.bench_settings import DATABASES, INSTALLED_APPS

BASE_APPS = ["django.contrib.contenttypes", "django.contrib.auth"]
PEER_APPS = {
    "procrastinate": ["procrastinate.contrib.django", "bench.peers"],
    "django-q2": ["django_q"],
    "db_worker": ["django_tasks", "django_tasks_db"],
}
_peer = os.environ.get("HTASK_BENCH_PEER", "all")
if _peer == "all":
    INSTALLED_APPS = [*INSTALLED_APPS, *(app for apps in PEER_APPS.values() for app in apps)]
else:
    INSTALLED_APPS = [*BASE_APPS, *PEER_APPS[_peer]]
DATABASES = {"default": {**DATABASES["default"], "CONN_MAX_AGE": None}}
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
# django-q2 with the ORM broker, 4 worker processes taking 4 tasks at a time; every
# result saved (the default keeps the last 250), so the bench can count them.
Q_CLUSTER = {
    "name": "bench",
    "orm": "default",
    "workers": 4,
    "bulk": 4,
    "timeout": 60,
    "retry": 120,
    "save_limit": 0,
}
