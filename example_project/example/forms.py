"""The reminder form: a text and when (a date and time, or a delay)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django import forms
from django.utils import timezone

DELAYS = [
    ("", "at the time above"),
    ("10", "in 10 seconds"),
    ("60", "in 1 minute"),
    ("600", "in 10 minutes"),
    ("3600", "in 1 hour"),
]


class ReminderForm(forms.Form):
    text = forms.CharField(max_length=200)
    at = forms.DateTimeField(
        required=False,
        label="When",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"],
    )
    delay = forms.ChoiceField(choices=DELAYS, required=False, label="or")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        at: datetime | None = data.get("at")
        delay = data.get("delay")
        if delay:
            data["due_at"] = timezone.now() + timedelta(seconds=int(delay))
        elif at is not None:
            if at <= timezone.now():
                self.add_error("at", f"{at:%Y-%m-%d %H:%M} is in the past")
            data["due_at"] = at
        else:
            raise forms.ValidationError("give a time or pick a delay")
        return data
