"""The admin's forms: a schedule's (registered functions, the schedule text parsed, the
arguments as JSON checked against the function's signature, retry exceptions as
dotted paths) and a pending task's (its time)."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.utils.html import format_html

from django_htask.models import RetryJitter, RetryKind, Schedule, Task
from django_htask.operations import validate_zone
from django_htask.retry import exception_name, split_names

from .common import RETRY_FIELDS

__all__ = ["ScheduleForm", "TaskForm", "safe_call"]


class _JSONText(forms.CharField):
    """JSON text that must decode to ``kind`` (a list or a dict)."""

    def __init__(self, kind: type, **kwargs: Any) -> None:
        self.kind = kind
        kwargs.setdefault("required", False)
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 2, "cols": 60}))
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> Any:
        text = (super().to_python(value) or "").strip()
        if not text:
            return self.kind()
        try:
            decoded = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"not valid JSON: {exc} in {text!r}") from exc
        if not isinstance(decoded, self.kind):
            what = (
                "a JSON list, e.g. [1, 2]" if self.kind is list else 'a JSON object, e.g. {"x": 1}'
            )
            raise ValidationError(f"must be {what}, got {text!r}")
        return decoded

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list | dict):
            return json.dumps(value, default=str)
        return value


def _function_choices(current: str | None) -> list[tuple[str, str]]:
    from django_htask.engine import registry  # noqa: PLC0415

    names = registry.names()
    choices = [("", "---------")] + [(n, n) for n in names]
    if current and current not in names:
        choices.append((current, f"{current} (not registered)"))
    return choices


class ScheduleForm(forms.ModelForm):  # type: ignore[type-arg]
    """The schedule form: registered functions, parsed schedule, JSON arguments."""

    function = forms.ChoiceField(
        choices=(),
        help_text=format_html(
            "a registered function ({} or {})",
            format_html("<code>{}</code>", "@task"),
            format_html("<code>{}</code>", "@periodic"),
        ),
    )
    call_args = _JSONText(list, label="Args", help_text="positional arguments, a JSON list")
    call_kwargs = _JSONText(dict, label="Kwargs", help_text="keyword arguments, a JSON object")

    class Meta:
        model = Schedule
        fields = (
            "name",
            "description",
            "function",
            "schedule",
            "timezone",
            "enabled",
            "grace",
            "catch_up",
            "overlap",
            *RETRY_FIELDS,
            "timeout",
        )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        instance = self.instance
        if "function" in self.fields:
            field = self.fields["function"]
            assert isinstance(field, forms.ChoiceField)
            field.choices = _function_choices(instance.function if instance.pk else None)
        if instance.pk and instance.payload:
            args, kwargs = safe_call(instance)
            self.initial.setdefault("call_args", list(args))
            self.initial.setdefault("call_kwargs", dict(kwargs))
        for name in ("retry_kind", "retry_jitter"):  # left out of a post: the default
            if name in self.fields:
                self.fields[name].required = False

    def clean_retry_kind(self) -> str:
        return str(self.cleaned_data.get("retry_kind") or RetryKind.EXPONENTIAL)

    def clean_retry_jitter(self) -> str:
        return str(self.cleaned_data.get("retry_jitter") or RetryJitter.NONE)

    def clean_retry_on(self) -> str:
        return _exception_paths(self.cleaned_data.get("retry_on") or "")

    def clean_give_up_on(self) -> str:
        return _exception_paths(self.cleaned_data.get("give_up_on") or "")

    def clean_timezone(self) -> str:
        value = (self.cleaned_data.get("timezone") or "UTC").strip()
        try:
            validate_zone(value)
        except ValueError as exc:
            raise ValidationError(str(exc)) from exc
        return value

    def clean(self) -> dict[str, Any]:
        from django_htask.engine import (  # noqa: PLC0415
            ArgumentError,
            FunctionNotRegistered,
            InvalidSchedule,
            PayloadError,
            parse_schedule,
            registry,
        )

        data = super().clean() or {}
        if "schedule" in self.fields:
            # What was typed, valid or not: the page shown again after a failed save
            # previews it, not the stored schedule (see ScheduleAdmin.next_runs).
            self.instance.htask_submitted = (
                self["schedule"].value() or "",
                (self["timezone"].value() or "").strip(),
                bool(self["enabled"].value()),
            )
        text = data.get("schedule")
        zone = data.get("timezone")
        if text and zone is not None:
            try:
                parse_schedule(text, tz=zone or None)
            except InvalidSchedule as exc:
                self.add_error("schedule", str(exc))
        if "function" not in self.fields:
            return data  # a code-defined schedule: its call is not edited here
        function = data.get("function")
        if function and not self.has_error("call_args") and not self.has_error("call_kwargs"):
            args = data.get("call_args") or []
            kwargs = data.get("call_kwargs") or {}
            try:
                self.instance.payload = registry.check_call(function, args, kwargs)
            except FunctionNotRegistered as exc:
                self.add_error("function", str(exc))
            except (ArgumentError, PayloadError) as exc:
                self.add_error(_argument_field(str(exc), kwargs), str(exc))
        return data

    def _update_errors(self, errors: ValidationError) -> None:
        """Add the model's own errors, without repeating what the form found; an error
        about the stored call belongs to the arguments."""
        if not hasattr(errors, "error_dict"):
            super()._update_errors(errors)  # type: ignore[misc]
            return
        kept: dict[str, list[ValidationError]] = {}
        for field, messages_ in errors.error_dict.items():
            target = field
            if field == "payload":
                target = "call_args" if "call_args" in self.fields else "__all__"
            if target in self.fields and self.has_error(target):
                continue
            if target != "__all__" and target not in self.fields:
                target = "__all__"
            if target == "__all__" and any(self.errors.values()):
                continue  # the form already says what is wrong
            kept.setdefault(target, []).extend(messages_)
        if kept:
            super()._update_errors(ValidationError(kept))  # type: ignore[misc]


def _argument_field(message: str, kwargs: dict[str, Any]) -> str:
    """Put an argument error on kwargs when it names one of the keyword arguments."""
    for key in kwargs:
        if repr(key) in message:
            return "call_kwargs"
    return "call_args"


def _exception_paths(text: str) -> str:
    """A ``retry_on`` / ``give_up_on`` as stored: each class's own dotted path
    (``ConnectionError`` is ``builtins.ConnectionError``); one that cannot be imported
    is left as typed, for the field's validator to name."""
    paths = []
    for name in split_names(text):
        try:
            paths.append(exception_name(name))
        except (TypeError, ValueError):
            paths.append(name)
    return ", ".join(paths)


def safe_call(obj: Schedule) -> tuple[tuple[Any, ...], dict[str, Any]]:
    try:
        return obj.call
    except ValueError:
        return (), {}


class TaskForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = Task
        fields = ("run_at",)
