"""The test settings with only the apps ``schedule()`` needs: the processes of
tests/integration/test_keys_processes.py set Django up in half the time."""

from tests.settings import *  # noqa: F403

INSTALLED_APPS = ["django.contrib.contenttypes", "django_htask", "tests.integration.testapp"]
