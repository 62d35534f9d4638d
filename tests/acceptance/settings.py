"""Settings for ``runscheduler`` run as a subprocess by the acceptance tests.

The database file comes from ``HTASK_ACCEPTANCE_DB``; ``HTASK_ACCEPTANCE_TIMEOUT``
sets SQLite's busy timeout (short, so a locked database shows as errors quickly);
``HTASK_ACCEPTANCE_TASK_MODULES`` (comma-separated) is ``HTASK["DJANGO_TASK_MODULES"]``;
``HTASK_ACCEPTANCE_ATEXIT`` names a file an exit handler of the project writes to.
"""

import atexit
import os
from pathlib import Path

SECRET_KEY = "acceptance-tests-only"
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_htask",
    "tests.acceptance.app",
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("HTASK_ACCEPTANCE_DB", "acceptance.sqlite3"),
        "OPTIONS": {
            "timeout": float(os.environ.get("HTASK_ACCEPTANCE_TIMEOUT", "5")),
            "transaction_mode": "IMMEDIATE",
        },
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
HTASK = {
    "SHUTDOWN_TIMEOUT": float(os.environ.get("HTASK_ACCEPTANCE_SHUTDOWN", "10")),
    "RETRY_BACKOFF": 0.2,
    "DB_RETRY": 0.2,
    "DB_RETRY_MAX": 1.0,
    "TIMEOUT_GRACE": 1.0,
}
if os.environ.get("HTASK_ACCEPTANCE_TASK_MODULES"):
    HTASK["DJANGO_TASK_MODULES"] = os.environ["HTASK_ACCEPTANCE_TASK_MODULES"].split(",")
if os.environ.get("HTASK_ACCEPTANCE_MAX_ABANDONED"):
    HTASK["MAX_ABANDONED_THREADS"] = int(os.environ["HTASK_ACCEPTANCE_MAX_ABANDONED"])
if os.environ.get("HTASK_ACCEPTANCE_ATEXIT"):
    atexit.register(Path(os.environ["HTASK_ACCEPTANCE_ATEXIT"]).write_text, "exit handler ran")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"django_htask": {"handlers": ["stderr"], "level": "INFO"}},
}

# django.tasks (Django >= 6.0; Django 5.2 ignores the setting).
TASKS = {"default": {"BACKEND": "django_htask.backends.HtaskBackend"}}
