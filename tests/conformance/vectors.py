"""The kinds of row in the ported tables, and the reasons we differ on purpose.

Each row names its source (file and test function, and the Go table index where the
test is a table) and states what the peer's test asserts. A row we answer differently
carries ``differs=Differs(reason, ours)``: the reason id is one of :data:`REASONS` (and
a row of the table "Where we differ from robfig/cron and croniter" in
docs/schedules.md), and ``ours`` is what we give instead, which the test asserts; so a
difference is tested, never skipped. ``ours`` is :data:`REJECTED` where we refuse the
text when it is parsed.

Times are ISO 8601 text. A naive time is a wall time in the row's zone (``tz``, UTC by
default, which is also where robfig's ``time.Local`` rows and croniter's naive
datetimes are read); an aware one is that instant.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

#: ``Differs.ours`` when we reject the text at parse time.
REJECTED: Literal["rejected"] = "rejected"

#: Why we differ, by id. The ids are the rows of the table in docs/schedules.md.
REASONS: dict[str, str] = {
    "n-n": "a range with equal ends is that one value (robfig/cron, Vixie cron); "
    "croniter 7.0 reads it as the whole field",
    "wrap": "a range whose start is above its end wraps around the end of the field "
    "(croniter); robfig/cron rejects it",
    "wrap-step": "a wrapping range with a step counts the step across the wrap "
    "(APR-MAR/2 is Apr, Jun, Aug, Oct, Dec, Feb); croniter restarts the count",
    "never-fires": "a spec that can never fire is rejected when it is parsed; robfig/cron "
    "accepts it and never runs it, croniter raises when asked for the next time",
    "dst-gap": "a fixed-hour occurrence in a spring-forward gap runs at the end of the gap "
    "(Vixie/ISC cron); robfig/cron skips it",
    "dst-repeat": "a fixed-hour occurrence in a repeated hour runs once, in the first pass "
    "(Vixie/ISC cron); robfig/cron and croniter run it in both passes",
    "every-ms": "@every keeps millisecond precision and counts from the instant given; "
    "robfig/cron rounds the delay down to whole seconds (at least one) and the start down "
    "to the second",
    "parser-options": "one parser, always 5 or 6 fields (seconds first) and descriptors; "
    "robfig/cron's configurable parsers are not offered",
    "too-long": "a cron text is at most 1,000 characters",
}


@dataclass(frozen=True)
class Differs:
    """We answer this row differently on purpose: ``ours`` instead of the peer's answer."""

    reason: str
    ours: object


@dataclass(frozen=True)
class _Row:
    """What every row has: its source test, its spec, and (by keyword) the peer's text
    where ours is written differently, and the difference we chose, if any."""

    source: str
    spec: str
    peer: str = field(default="", kw_only=True)
    differs: Differs | None = field(default=None, kw_only=True)


@dataclass(frozen=True)
class Next(_Row):
    """``next_after`` chained from ``start``: the results numbered ``nth`` (1-based,
    default 1, 2, ...) are ``expected`` ("" where the peer finds none)."""

    start: str
    expected: tuple[str, ...]
    tz: str = "UTC"
    nth: tuple[int, ...] = ()


@dataclass(frozen=True)
class Range(_Row):
    """Every occurrence from ``start`` to ``stop`` (both included unless ``exclusive``):
    croniter's ``croniter_range``."""

    start: str
    stop: str
    expected: tuple[str, ...]
    tz: str = "UTC"
    exclusive: bool = False


@dataclass(frozen=True)
class Match(_Row):
    """Whether an occurrence falls in ``(at - precision, until]`` (``until`` defaults to
    ``at``): robfig's activation test (``Next(t - 1s) == t``, precision 1 s) and
    croniter's ``match`` / ``match_range`` (precision 60 s for 5 fields, 1 s for 6)."""

    at: str
    expected: bool
    tz: str = "UTC"
    precision: int = 1
    until: str = ""


FieldValues: TypeAlias = tuple[int, ...] | Literal["*"]


@dataclass(frozen=True)
class Fields(_Row):
    """The values fields select ("*": every value of the field); for a schedule with a
    zone, ``tz`` is its zone; an ``@every`` spec gives ``{"every": seconds}``."""

    fields: dict[str, FieldValues | float]
    tz: str = "UTC"


@dataclass(frozen=True)
class Valid(_Row):
    """The text parses (``valid``) or is rejected."""

    valid: bool


@dataclass(frozen=True)
class Order:
    """From ``start``, the specs come due in the order given."""

    source: str
    start: str
    specs: tuple[str, ...]
    tz: str = "UTC"
    differs: Differs | None = None


Row: TypeAlias = Next | Range | Match | Fields | Valid | Order


def peer_test(source: str) -> str:
    """The test a row's source names: ``"spec_test.go::TestNext[19]"`` gives
    ``"spec_test.go::TestNext"``."""
    file, _, rest = source.partition("::")
    name = re.split(r"[\[ ]", rest)[0]
    return f"{file}::{name}"


def not_ported(tests: tuple[str, ...], reasons: dict[str, str]) -> str:
    """``"161 of the 264 tests (extension 113, option 27, ...)"``: the words the module
    docstring and docs/schedules.md use for what is not ported, by kind."""
    kinds = Counter(reason.split(":")[0] for reason in reasons.values())
    left = ", ".join(f"{kind} {count}" for kind, count in kinds.most_common())
    return f"{len(reasons)} of the {len(tests)} tests ({left})"


def coverage(
    suite: str,
    tests: tuple[str, ...],
    rows: list[Row],
    reasons: dict[str, str],
    partly: dict[str, str],
) -> str:
    """The suite's row of the coverage table in docs/schedules.md."""
    ported = {peer_test(row.source) for row in rows}
    differ = sum(1 for row in rows if row.differs is not None)
    return (
        f"| {suite} | {len(tests)} | {len(ported)} ({len(partly)}) | {len(rows)} | {differ} "
        f"| {not_ported(tests, reasons)} |"
    )
