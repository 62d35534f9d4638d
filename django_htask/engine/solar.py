"""Solar events (dawns, sunrise, solar noon, sunset, dusks) from the astral library.

The events are django-celery-beat's (and celery's ``solar`` schedule's), by the same
names; the sun's depression below the horizon for each is astral's (and celery's):
6° for civil, 12° for nautical and 18° for astronomical twilight, and for sunrise and
sunset the upper limb of the sun on the horizon, refraction included.

astral is an optional dependency (``pip install django-htask[solar]``): it is imported
only when a solar schedule is made or evaluated, so the rest of the engine works
without it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

from .errors import InvalidSchedule

__all__ = ["EVENTS", "event_on", "local_mean_time", "require_astral"]

#: The event names, in the order of a day, and what each is in words.
EVENTS: dict[str, str] = {
    "dawn_astronomical": "astronomical dawn",
    "dawn_nautical": "nautical dawn",
    "dawn_civil": "civil dawn",
    "sunrise": "sunrise",
    "solar_noon": "solar noon",
    "sunset": "sunset",
    "dusk_civil": "civil dusk",
    "dusk_nautical": "nautical dusk",
    "dusk_astronomical": "astronomical dusk",
}

# event -> (astral.sun function, depression in degrees or None)
_ASTRAL: dict[str, tuple[str, float | None]] = {
    "dawn_astronomical": ("dawn", 18.0),
    "dawn_nautical": ("dawn", 12.0),
    "dawn_civil": ("dawn", 6.0),
    "sunrise": ("sunrise", None),
    "solar_noon": ("noon", None),
    "sunset": ("sunset", None),
    "dusk_civil": ("dusk", 6.0),
    "dusk_nautical": ("dusk", 12.0),
    "dusk_astronomical": ("dusk", 18.0),
}


def require_astral() -> None:
    """Raise :class:`InvalidSchedule` saying how to install astral if it is missing."""
    _functions()


@functools.cache
def _functions() -> tuple[Any, dict[str, Callable[..., datetime]]]:
    try:
        from astral import Observer, sun  # noqa: PLC0415
    except ImportError:
        raise InvalidSchedule(
            "@solar schedules need the astral library: pip install django-htask[solar]"
        ) from None
    return Observer, {name: getattr(sun, name) for name, _ in _ASTRAL.values()}


@functools.lru_cache(maxsize=1024)
def local_mean_time(longitude: float) -> timezone:
    """The zone of local mean time at ``longitude`` (4 minutes a degree, east ahead).

    A day in this zone runs from one solar midnight to the next, roughly: no sunrise,
    noon or sunset falls near its edges, so each of its days holds at most one of each.
    """
    return timezone(timedelta(minutes=round(longitude * 4)))


@functools.lru_cache(maxsize=4096)
def event_on(event: str, latitude: float, longitude: float, day: date) -> datetime | None:
    """When ``event`` happens on ``day`` (local mean time) at a place, as UTC to the
    second; None when it does not happen that day (the sun stays above or below that
    elevation: polar day or night)."""
    observer_type, functions = _functions()
    name, depression = _ASTRAL[event]
    observer = observer_type(latitude=latitude, longitude=longitude, elevation=0.0)
    kwargs: dict[str, Any] = {"tzinfo": local_mean_time(longitude)}
    if depression is not None:
        kwargs["depression"] = depression
    try:
        found = functions[name](observer, day, **kwargs)
    except (ValueError, ArithmeticError):  # "Sun never reaches …", "math domain error"
        return None
    # To the nearest second: astral's times are good to a minute or so, and a run
    # time in whole seconds reads better.
    found = found.astimezone(UTC)
    return (found + timedelta(microseconds=500_000)).replace(microsecond=0)
