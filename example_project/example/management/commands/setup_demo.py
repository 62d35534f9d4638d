"""``manage.py setup_demo``: the demo superuser and one admin-defined schedule.

Idempotent: an existing user or schedule is left as it is. The user's name and
password come from ``HTASK_EXAMPLE_USER`` / ``HTASK_EXAMPLE_PASSWORD`` (demo / demo).
"""

from __future__ import annotations

import os
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from django_htask.models import Origin, Schedule

DIGEST = "example-digest"


class Command(BaseCommand):
    help = "Create the demo superuser and the admin-defined example schedule."

    def handle(self, *args: Any, **options: Any) -> None:
        username = os.environ.get("HTASK_EXAMPLE_USER", "demo")
        password = os.environ.get("HTASK_EXAMPLE_PASSWORD", "demo")
        users = get_user_model().objects
        if not users.filter(username=username).exists():
            users.create_superuser(username, f"{username}@example.com", password)
            self.stdout.write(f"created the superuser {username!r} (password {password!r})")
        if not Schedule.objects.filter(name=DIGEST).exists():
            row = Schedule(
                name=DIGEST,
                function="example.tasks:digest",
                schedule="0 9 * * MON-FRI",
                timezone="Europe/Paris",
                origin=Origin.ADMIN,
            )
            row.set_call(kwargs={"greeting": "good morning"})
            row.save()
            self.stdout.write(f"created the admin-defined schedule {DIGEST!r}")
