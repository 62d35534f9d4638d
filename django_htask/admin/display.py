"""How the admin writes values that need care: times and where code lives.

:func:`times`
    an instant to the second with its zone, in the site's zone (``TIME_ZONE``) and, when
    it reads differently there, in a schedule's own zone beside it.
:func:`defined_at`
    where a registered function is defined: its module, file and line.
"""

from __future__ import annotations

import inspect
import re
import zoneinfo
from datetime import datetime, tzinfo

from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_htask.clock import TIME_FORMAT, stamp

__all__ = ["TIME_FORMAT", "defined_at", "site_zone", "stamp", "times"]


def site_zone() -> tzinfo:
    """The zone the admin shows times in (the current one: ``TIME_ZONE`` unless a
    middleware activated another)."""
    return timezone.get_current_timezone()


def _zone(name: str | None) -> tzinfo | None:
    if not name:
        return None
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None  # a broken schedule's zone: the site's time is still right


def times(at: datetime | None, zone: str | None = None) -> SafeString:
    """``at`` in the site's zone; first in the zone ``zone`` (a schedule's) when that
    reads differently, the site's below it. ``-`` for no time."""
    if at is None:
        return format_html("{}", "-")
    site = stamp(at, site_zone())
    own = _zone(zone)
    if own is None or stamp(at, own) == site:
        return _time(site, "htask-time")
    return format_html(
        "{}<br>{}", _time(stamp(at, own), "htask-time"), _time(site, "htask-time htask-site-time")
    )


def _time(text: str, css: str) -> SafeString:
    """A time that may break between its date and its clock, nowhere else (a narrow
    column puts them on two lines)."""
    day, _, clock = text.partition(" ")
    return format_html(
        '<span class="{}"><span class="htask-nowrap">{}</span> <span class="htask-nowrap">'
        "{}</span></span>",
        css,
        day,
        clock,
    )


def defined_at(function: str) -> str:
    """Where the registered function ``function`` is defined, in words:
    ``reminders.tasks.count_waiting in /srv/mysite/reminders/tasks.py, line 12`` (the
    line of its first decorator); its module only when the file is unknown; an
    empty string when it is not registered in this process."""
    from django_htask.engine import registry  # noqa: PLC0415

    try:
        fn = inspect.unwrap(registry.get(function))
    except LookupError:
        return ""
    what = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', function)}"
    code = getattr(fn, "__code__", None)
    if code is None:
        return what
    try:
        path = inspect.getsourcefile(fn) or code.co_filename
    except TypeError:
        path = code.co_filename
    return f"{what} in {path}, line {code.co_firstlineno}"


#: Where a dotted name may wrap in a narrow column: after its dots, colons and
#: underscores, never inside a word.
_BREAKS = re.compile(r"([.:_])")


def breakable(name: str) -> SafeString:
    """``name`` (a function, a schedule's name) escaped, with a place to wrap
    (``<wbr>``) after each dot, colon and underscore: a narrow column breaks
    ``myapp.tasks:send_reminder`` at ``myapp.tasks:`` / ``send_reminder``, not in a
    word (the lists' cells wrap only there and at spaces)."""
    out = SafeString("")
    for part in _BREAKS.split(name):
        wrap = "{}<wbr>" if _BREAKS.fullmatch(part) else "{}"
        out += format_html(wrap, part)
    return out
