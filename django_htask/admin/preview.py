"""The preview of a schedule's next runs: what the scheduler will fire once the form is
saved, in the schedule's zone and in the site's. The schedule page's box
(:func:`preview_box`), kept up to date while the form is edited by
``schedule_preview.js`` through the JSON endpoint ``preview/``
(:meth:`~django_htask.admin.schedules.ScheduleAdmin.preview_view`, which returns
:func:`preview`)."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from django_htask import clock
from django_htask.models import Schedule
from django_htask.operations import edited_runs, validate_zone

from .display import site_zone

__all__ = ["PREVIEW_COUNT", "preview", "preview_box"]

PREVIEW_COUNT = 5


def preview_box(site: str, obj: Schedule | None) -> SafeString:
    """The preview box: filled here for a saved schedule, and updated by
    ``schedule_preview.js`` while the schedule, zone or enabled flag is edited.

    It shows what the scheduler will fire once the form is saved (see
    :func:`~django_htask.operations.edited_runs`): unchanged, the stored
    ``next_run_at`` and the occurrences after it."""
    url = reverse(f"{site}:django_htask_schedule_preview")
    # After a failed save, ``obj`` holds what was typed: the preview is of that (or
    # says why there is none), never of the stored schedule beside the error.
    submitted: tuple[str, str, bool] | None = getattr(obj, "htask_submitted", None)
    if obj is None or (not obj.pk and submitted is None):
        inner = format_html("{}", "type a schedule to see its next runs")
        pk = schedule = zone = ""
    else:
        schedule, zone, enabled = submitted or (obj.schedule, obj.timezone, obj.enabled)
        # Compared with the stored row, which is what the scheduler fires today.
        stored = Schedule.objects.filter(pk=obj.pk).first() if obj.pk else None
        inner = _preview_html(preview(stored, schedule, zone, enabled))
        if submitted is not None:
            inner = format_html('{}<p class="help">{}</p>', inner, "of the values above, not saved")
        pk = str(obj.pk or "")
    return format_html(
        '<div id="htask-live-preview" data-url="{}" data-object="{}" data-schedule="{}" '
        'data-timezone="{}">{}</div>',
        url,
        pk,
        schedule,
        zone,
        inner,
    )


def preview(stored: Schedule | None, text: str, zone: str, enabled: bool) -> dict[str, Any]:
    """The next five runs once ``stored`` (None: a new schedule) is saved with ``text``,
    ``zone`` and ``enabled``, in the zone and in UTC; or the error. ``note`` says why
    there are none."""
    shown = zone or "UTC"
    site = timezone.get_current_timezone_name()
    try:
        tz = validate_zone(shown)
        runs = edited_runs(stored, text, zone, enabled, PREVIEW_COUNT, clock.now())
    except ValueError as exc:
        return {"zone": shown, "site_zone": site, "runs": [], "error": str(exc), "note": ""}
    note = "disabled: no runs" if not enabled else "none: the schedule will not fire again"
    rows = [{"local": run.text(tz), "site": run.text(site_zone())} for run in runs]
    return {
        "zone": shown,
        # The site's zone is left out where it reads the same (a UTC schedule on a UTC
        # site): one column, not two identical ones.
        "site_zone": None if all(r["local"] == r["site"] for r in rows) else site,
        "runs": rows,
        "error": None,
        "note": "" if runs else note,
    }


def _preview_html(data: dict[str, Any]) -> SafeString:
    if data["error"]:
        return format_html('<p class="htask-preview-error errornote">{}</p>', data["error"])
    if not data["runs"]:
        return format_html("{}", data["note"])
    zones = [data["zone"]] + ([data["site_zone"]] if data["site_zone"] else [])
    keys = ("local", "site")[: len(zones)]
    cells = "".join("<td>{}</td>" for _ in keys)
    rows = format_html_join("", f"<tr>{cells}</tr>", ([r[k] for k in keys] for r in data["runs"]))
    return format_html(
        '<table class="htask-preview"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>',
        format_html_join("", "<th>{}</th>", ([z] for z in zones)),
        rows,
    )
