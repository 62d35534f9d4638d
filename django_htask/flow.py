"""Flow control of one-off tasks: a rate limit (``@task(rate_limit="100/m")``) and the
partition a call's ``per=`` argument puts it in (``@task(max_running=3,
per="account_id")``), as docs/howto-exactly-one.md describes them.

A task's *flow* is its function, and its per key when it has one: its per-key limit
(``max_running`` with ``per=``) counts the running tasks of its flow, and its rate limit
the starts of its flow.

The window of a rate limit: **at most N starts in any interval of P seconds** (a
sliding window, not a fixed one cut at whole minutes). A claim starts a task of a
rate-limited flow at ``now`` only if fewer than N of the flow's starts counted are
later than ``now - P``; each start is counted, in the claim's own transaction, until
its start plus P (``store/base.py``, ``pick_gated``).

Pure Python: no Django import.
"""

from __future__ import annotations

import enum
import re
import uuid
from dataclasses import dataclass

__all__ = [
    "PER_KEY_MAX_LENGTH",
    "RATE_COUNT_MAX",
    "RATE_PERIOD_MAX",
    "RateLimit",
    "check_per",
    "check_rate_limit",
    "flow_key",
    "per_key",
]

#: The longest per key (the text of a ``per=`` argument's value).
PER_KEY_MAX_LENGTH = 200
#: The most starts a rate limit allows per period.
RATE_COUNT_MAX = 100_000
#: The longest period of a rate limit, in seconds: one day.
RATE_PERIOD_MAX = 86_400

#: A period's unit, in seconds, by each name it may be written with.
_UNITS = {
    **dict.fromkeys(("s", "sec", "second"), 1),
    **dict.fromkeys(("m", "min", "minute"), 60),
    **dict.fromkeys(("h", "hour"), 3600),
    **dict.fromkeys(("d", "day"), 86_400),
}
_RATE = re.compile(r"\s*(\d+)\s*/\s*(\d*)\s*([a-z]+)\s*")


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``count`` starts in any interval of ``period`` seconds, across the
    nodes. Written ``"100/m"``, ``"20/s"``, ``"1000/h"``, ``"5000/d"``, or with a
    number of units, ``"10/5m"`` (:meth:`parse`). ValueError naming a number out of
    range (1 to :data:`RATE_COUNT_MAX` starts, 1 second to a day)."""

    count: int
    period: int

    def __post_init__(self) -> None:
        for name, value, high in (
            ("starts", self.count, RATE_COUNT_MAX),
            ("seconds", self.period, RATE_PERIOD_MAX),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
                raise ValueError(f"rate_limit must allow 1 to {high} {name}, got {value!r}")

    @classmethod
    def parse(cls, text: str) -> RateLimit:
        """The limit ``text`` writes; ValueError naming it when it is not one."""
        found = _RATE.fullmatch(text.lower())
        unit = None if found is None else _UNITS.get(_singular(found[3]))
        if found is None or unit is None:
            raise ValueError(
                "rate_limit must be starts per period, as '100/m', '20/s', '1000/h', "
                f"'5000/d' or '10/5m', got {text!r}"
            )
        try:
            return cls(int(found[1]), int(found[2] or 1) * unit)
        except ValueError as exc:
            raise ValueError(f"{exc} in {text!r}") from None

    def __str__(self) -> str:
        for name, seconds in (("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
            if self.period % seconds == 0:
                n = self.period // seconds
                return f"{self.count}/{'' if n == 1 else n}{name}"
        raise AssertionError("unreachable")  # every period is whole seconds


def _singular(unit: str) -> str:
    """``unit`` without the plural's ``s`` (``hours``; ``ms`` is no plural of ``m``)."""
    one = unit.removesuffix("s")
    return one if len(one) > 1 else unit


def check_rate_limit(value: object) -> RateLimit:
    """``rate_limit=`` as ``@task`` and ``schedule()`` take it: its text (``"100/m"``)
    or a :class:`RateLimit`; TypeError or ValueError naming it otherwise."""
    if isinstance(value, RateLimit):
        return value
    if not isinstance(value, str):
        raise TypeError(f"rate_limit must be a str such as '100/m', got {value!r}")
    return RateLimit.parse(value)


def check_per(per: object) -> str:
    """``per=`` as ``@task`` takes it: the name of a parameter (its check against the
    function is :func:`django_htask.functions.task`'s)."""
    if not isinstance(per, str) or not per.isidentifier():
        raise ValueError(f"per must name a parameter of the function, got {per!r}")
    return per


def per_key(per: str, value: object) -> str:
    """The per key of a call whose ``per`` parameter takes ``value``: its text. A str,
    an int, a UUID or an enum of one of those can be a key, of at most
    :data:`PER_KEY_MAX_LENGTH` characters; ValueError naming the parameter and the
    value otherwise."""
    plain = value.value if isinstance(value, enum.Enum) else value
    if isinstance(plain, bool) or not isinstance(plain, str | int | uuid.UUID):
        raise ValueError(
            f"per={per!r}: the value of {per} must be a str, an int or a UUID to be a key, "
            f"got {value!r}"[:300]
        )
    key = str(plain)
    if len(key) > PER_KEY_MAX_LENGTH:
        raise ValueError(
            f"per={per!r}: the value of {per} must be at most {PER_KEY_MAX_LENGTH} "
            f"characters as a key, got {len(key)}: {key[:40]!r}…"
        )
    return key


def flow_key(function: str, per: str | None) -> str:
    """The name of a task's flow: its function, with its per key in brackets when it
    has one (``myapp.tasks:sync[7]``): what its per-key limit and its rate limit
    count, and what operators see waiting."""
    return function if per is None else f"{function}[{per}]"
