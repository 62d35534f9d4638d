"""The acceptance settings with the scheduler's tables in a database of their own.

``HTASK_ACCEPTANCE_DB`` is the site's SQLite file ("default": auth, contenttypes),
``HTASK_ACCEPTANCE_QUEUE_DB`` the scheduler's ("queue"); ``HTASK["DATABASE"]`` names it
and :class:`django_htask.routers.HtaskRouter` routes the models and their migrations
there (docs/databases.md, "A database of its own").
"""

import os

from tests.acceptance.settings import *  # noqa: F403
from tests.acceptance.settings import DATABASES, HTASK

DATABASES["queue"] = {
    **DATABASES["default"],
    "NAME": os.environ.get("HTASK_ACCEPTANCE_QUEUE_DB", "acceptance-queue.sqlite3"),
}
HTASK["DATABASE"] = "queue"
DATABASE_ROUTERS = ["django_htask.routers.HtaskRouter"]
