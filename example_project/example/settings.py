"""Settings of the django-htask example project (SQLite, one node).

``HTASK_EXAMPLE_DB`` names the SQLite file (default ``example_project/db.sqlite3``).
"""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = "example-only-not-secret"
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htask",
    "example",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "example.wsgi.application"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("HTASK_EXAMPLE_DB") or BASE_DIR / "db.sqlite3",
        # The web server and the scheduler write to one SQLite file: wait for the lock
        # (timeout) and take it when a transaction begins (IMMEDIATE), so a transaction
        # that reads and then writes never fails with "database is locked"; in WAL mode
        # with synchronous=NORMAL a commit costs no fsync (a power cut may lose the last
        # commits, never the file).
        "OPTIONS": {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
    }
}

USE_TZ = True
TIME_ZONE = "UTC"
LANGUAGE_CODE = "en-us"
USE_I18N = True
STATIC_URL = "static/"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "home"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# The scheduler looks for changes made by the web process every half second.
HTASK = {"POLL_INTERVAL": 0.5}

# Each line with its time, to the second with the zone (TIME_ZONE: Django sets the
# process's zone to it), as the admin writes times: 2030-01-01 09:00:00 UTC INFO ...
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "timed": {
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
            "datefmt": "%Y-%m-%d %H:%M:%S %Z",
        },
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "timed"}},
    "loggers": {"django_htask": {"handlers": ["console"], "level": "INFO"}},
}
