"""``bench/cluster.py``'s django-htask nodes: the cluster settings, polling every
second, quiet. Its peers run with ``tests.cluster.peer_settings``."""

import os

from tests.cluster.settings import *  # noqa: F403
from tests.cluster.settings import HTASK

HTASK = {
    **HTASK,
    "POLL_INTERVAL": 1.0,
    "PREFETCH_WITHIN": float(os.environ.get("HTASK_BENCH_PREFETCH_WITHIN", "0.1")),
    "PREFETCH_PER_WORKER": int(os.environ.get("HTASK_BENCH_PREFETCH_PER_WORKER", "8")),
}
LOGGING = {"version": 1, "disable_existing_loggers": False}
