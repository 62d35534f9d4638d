"""``bench/cluster.py``'s django-htask nodes: the cluster settings, polling every
second, quiet. Its peers run with ``tests.cluster.peer_settings``."""

import os

from tests.cluster.settings import *  # noqa: F403
from tests.cluster.settings import HTASK

HTASK = {
    **HTASK,
    "POLL_INTERVAL": 1.0,
    "PREFETCH": int(os.environ.get("HTASK_BENCH_PREFETCH", "0")),
}
LOGGING = {"version": 1, "disable_existing_loggers": False}
