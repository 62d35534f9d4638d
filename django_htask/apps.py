"""Django app configuration for django_htask."""

from django.apps import AppConfig


class HtaskConfig(AppConfig):
    name = "django_htask"
    verbose_name = "Scheduler"
    default_auto_field = "django.db.models.BigAutoField"
