"""Settings for ``runscheduler`` nodes run by the multi-node acceptance tests.

The database comes from ``HTASK_CLUSTER_DB_URL`` (PostgreSQL, or MariaDB for a
``mysql://`` URL). Heartbeats, leases and the node
timeout are short so a killed node is noticed within seconds; the poll is slow, so
edits seen quickly are seen through LISTEN/NOTIFY (on PostgreSQL).
``HTASK_CLUSTER_DEFAULTS=1`` keeps
django-htask's own defaults instead (what a user gets); ``HTASK_CLUSTER_SHUTDOWN`` sets
``SHUTDOWN_TIMEOUT``, ``HTASK_CLUSTER_RETRY_BACKOFF`` ``RETRY_BACKOFF``,
``HTASK_CLUSTER_NODE_TIMEOUT`` ``NODE_TIMEOUT``, ``HTASK_CLUSTER_POLL``
``POLL_INTERVAL``, ``HTASK_CLUSTER_PRUNE`` ``PRUNE_INTERVAL``,
``HTASK_CLUSTER_PRUNE_BATCH`` ``PRUNE_BATCH``.
"""

import os

from tests import mariadbcluster, pgcluster

SECRET_KEY = "cluster-tests-only"
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_htask",
    "tests.cluster.clusterapp",
]
URL = os.environ.get("HTASK_CLUSTER_DB_URL", "postgresql://postgres@127.0.0.1/htask")
#: PostgreSQL, or MariaDB for a mysql:// URL (tests/cluster/test_mariadb_nodes.py).
SERVER = mariadbcluster if URL.startswith(("mysql:", "mariadb:")) else pgcluster
DATABASES = {"default": SERVER.database_settings(URL)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
HTASK = {
    "WORKERS": 8,
    "POLL_INTERVAL": 5.0,
    "HEARTBEAT_INTERVAL": 1.0,
    "NODE_TIMEOUT": 6.0,
    "LEASE": 8.0,
    "LOOKAHEAD": 10.0,
    "SHUTDOWN_TIMEOUT": 5.0,
    "DB_RETRY": 0.2,
    "DB_RETRY_MAX": 1.0,
    "TIMEOUT_GRACE": 1.0,
}
if os.environ.get("HTASK_CLUSTER_DEFAULTS"):
    HTASK = {}
if os.environ.get("HTASK_CLUSTER_SHUTDOWN"):
    HTASK["SHUTDOWN_TIMEOUT"] = float(os.environ["HTASK_CLUSTER_SHUTDOWN"])
if os.environ.get("HTASK_CLUSTER_RETRY_BACKOFF"):
    HTASK["RETRY_BACKOFF"] = float(os.environ["HTASK_CLUSTER_RETRY_BACKOFF"])
if os.environ.get("HTASK_CLUSTER_NODE_TIMEOUT"):
    HTASK["NODE_TIMEOUT"] = float(os.environ["HTASK_CLUSTER_NODE_TIMEOUT"])
if os.environ.get("HTASK_CLUSTER_POLL"):
    HTASK["POLL_INTERVAL"] = float(os.environ["HTASK_CLUSTER_POLL"])
if os.environ.get("HTASK_CLUSTER_MAX_ABANDONED"):
    HTASK["MAX_ABANDONED_THREADS"] = int(os.environ["HTASK_CLUSTER_MAX_ABANDONED"])
if os.environ.get("HTASK_CLUSTER_PRUNE"):
    HTASK["PRUNE_INTERVAL"] = float(os.environ["HTASK_CLUSTER_PRUNE"])
if os.environ.get("HTASK_CLUSTER_PREFETCH_WITHIN"):
    HTASK["PREFETCH_WITHIN"] = float(os.environ["HTASK_CLUSTER_PREFETCH_WITHIN"])
if os.environ.get("HTASK_CLUSTER_PREFETCH_PER_WORKER"):
    HTASK["PREFETCH_PER_WORKER"] = int(os.environ["HTASK_CLUSTER_PREFETCH_PER_WORKER"])
if os.environ.get("HTASK_CLUSTER_PRUNE_BATCH"):
    HTASK["PRUNE_BATCH"] = int(os.environ["HTASK_CLUSTER_PRUNE_BATCH"])
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # the time and the thread of each line: what a failed fault test needs read
    "formatters": {"timed": {"format": "%(asctime)s %(threadName)s %(message)s"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "timed"}},
    "loggers": {"django_htask": {"handlers": ["stderr"], "level": "INFO"}},
}
