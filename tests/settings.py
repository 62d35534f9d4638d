"""Settings for the test suite (SQLite unless HTASK_TEST_DATABASE_URL names PostgreSQL
or MariaDB/MySQL).

The SQLite test database is a file (not ``:memory:``): the scheduler's threads and the
``runscheduler`` subprocesses open their own connections, and a file gives them
SQLite's ordinary locking with a busy timeout.
"""

import importlib.util
import os
import tempfile

SECRET_KEY = "tests-only"
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_htask",
    "tests.integration.testapp",
]
# tests/integration/test_celery_beat.py imports from django-celery-beat's real tables
# (a test-only dependency, absent where it does not support the Django version).
if importlib.util.find_spec("django_celery_beat") is not None:
    INSTALLED_APPS.append("django_celery_beat")
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": ":memory:",
        "OPTIONS": {"timeout": 20},
        "TEST": {"NAME": os.path.join(tempfile.gettempdir(), f"htask-tests-{os.getpid()}.sqlite3")},
    }
}
if os.environ.get("HTASK_TEST_DATABASE_URL"):  # python -m tests.pgcluster -- pytest
    _url = os.environ["HTASK_TEST_DATABASE_URL"]
    if _url.startswith(("mysql:", "mariadb:")):  # python -m tests.mariadbcluster -- pytest
        from tests.mariadbcluster import database_settings
    else:
        from tests.pgcluster import database_settings

    DATABASES = {"default": database_settings(_url)}
# A second database, for tests/integration/test_own_database.py (HTASK["DATABASE"],
# django_htask.routers.HtaskRouter): another SQLite file, or another database on the
# same throw-away server (Django creates test_<name>_queue beside test_<name>). Created
# only for the tests that ask for it (pytest-django's ``databases=``).
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    _queue_file = os.path.join(tempfile.gettempdir(), f"htask-tests-queue-{os.getpid()}.sqlite3")
    # A file, not ":memory:", even where the tests that set it up do not run: the
    # process pool refuses an in-memory database among those it hands its processes.
    DATABASES["queue"] = {
        **DATABASES["default"],
        "NAME": _queue_file,
        "TEST": {"NAME": _queue_file},
    }
else:
    DATABASES["queue"] = {**DATABASES["default"], "NAME": f"{DATABASES['default']['NAME']}_queue"}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# The suite's SQLite begins transactions DEFERRED on purpose: pytest-django wraps a
# test in a transaction, which begun IMMEDIATE would hold the write lock for the whole
# test. tests/integration/test_checks.py checks the warning itself.
SILENCED_SYSTEM_CHECKS = ["django_htask.W011"]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
ROOT_URLCONF = "tests.urls"
STATIC_URL = "static/"

HTASK = {"RETRY_BACKOFF": 1.0}

# django.tasks (Django >= 6.0; Django 5.2 ignores the setting).
TASKS = {"default": {"BACKEND": "django_htask.backends.HtaskBackend"}}
