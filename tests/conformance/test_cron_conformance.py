"""Run robfig/cron's and croniter's own test vectors against our parser and schedules.

Every row passes, or is a difference we chose (its reason in
:data:`tests.conformance.vectors.REASONS` and in the table "Where we differ from
robfig/cron and croniter" of docs/schedules.md), and then the test asserts our answer.
"""

from __future__ import annotations

import ast
import importlib.util
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from django_htask.engine import CronSchedule, IntervalSchedule, InvalidSchedule, parse_schedule
from django_htask.engine.cron_expression import FIELDS

from . import croniter_vectors, robfig_vectors
from .vectors import (
    REASONS,
    REJECTED,
    Fields,
    Match,
    Next,
    Order,
    Range,
    Row,
    Valid,
    coverage,
    not_ported,
    peer_test,
)

ROWS: list[Row] = [*robfig_vectors.ROWS, *croniter_vectors.ROWS]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "schedules.md"

_FULL = {
    "second": tuple(range(60)),
    "minute": tuple(range(60)),
    "hour": tuple(range(24)),
    "day-of-month": tuple(range(1, 32)),
    "month": tuple(range(1, 13)),
    "day-of-week": tuple(range(7)),
}
_GO_LAYOUTS = ("%a %b %d %H:%M %Y", "%a %b %d %H:%M:%S %Y", "%a %b %d %H:%M:%S.%f %Y")


def instant(text: str, tz: str) -> datetime:
    """ISO 8601 or Go's ``Mon Jan 2 15:04[:05] 2006`` as UTC; a naive time is read in
    ``tz``."""
    for layout in _GO_LAYOUTS:
        try:
            dt = datetime.strptime(text, layout)
            break
        except ValueError:
            continue
    else:
        dt = datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=ZoneInfo(tz))
    return dt.astimezone(UTC)  # so that subtracting a second is elapsed time, not wall time


def _when(value: object, tz: str) -> object:
    """A row's expected answer (or ``Differs.ours``) in the form :func:`answer` gives."""
    if value == REJECTED or isinstance(value, bool):
        return value
    if isinstance(value, tuple) and all(isinstance(v, str) for v in value):
        return tuple(None if v == "" else instant(v, tz) for v in value)
    return value


def _fields(row: Fields, value: object) -> object:
    if not isinstance(value, dict):
        return value
    return {name: _FULL[name] if v == "*" else v for name, v in value.items()} | {"tz": row.tz}


def expected(row: Row, value: object) -> object:
    if isinstance(row, Fields):
        return _fields(row, value)
    if isinstance(row, (Order, Valid)):
        return value
    return _when(value, row.tz)


def answer(row: Row) -> object:
    """What we give for the row (:data:`REJECTED` if the text is refused)."""
    if isinstance(row, Order):
        start = instant(row.start, row.tz)
        due = {spec: parse_schedule(spec, row.tz).next_after(start) for spec in row.specs}
        return tuple(
            sorted(row.specs, key=lambda spec: due[spec] or datetime.max.replace(tzinfo=UTC))
        )
    try:
        schedule = parse_schedule(row.spec, getattr(row, "tz", "UTC"))
    except InvalidSchedule:
        return False if isinstance(row, Valid) else REJECTED
    if isinstance(row, Valid):
        return True
    if isinstance(row, Fields):
        if isinstance(schedule, IntervalSchedule):
            return {"every": schedule.seconds, "tz": row.tz}
        assert isinstance(schedule, CronSchedule)
        got: dict[str, object] = {name: schedule.cron.values(name) for name in row.fields}
        return got | {"tz": schedule.tz.key}
    if isinstance(row, Next):
        when: datetime | None = instant(row.start, row.tz)
        results: list[datetime | None] = []
        for _ in range(max(row.nth or (len(row.expected),))):
            when = None if when is None else schedule.next_after(when)
            results.append(when)
        return tuple(results[n - 1] for n in row.nth) if row.nth else tuple(results)
    if isinstance(row, Range):
        start, stop = instant(row.start, row.tz), instant(row.stop, row.tz)
        found = []
        when = schedule.next_after(start if row.exclusive else start - timedelta(microseconds=1))
        while when is not None and (when < stop or (when == stop and not row.exclusive)):
            found.append(when)
            when = schedule.next_after(when)
        return tuple(found)
    assert isinstance(row, Match)
    at = instant(row.at, row.tz)
    until = instant(row.until, row.tz) if row.until else at
    found_at = schedule.next_after(at - timedelta(seconds=row.precision))
    return found_at is not None and found_at <= until


def _row_id(row: Row) -> str:
    spec = getattr(row, "spec", "")
    return f"{row.source} {spec}".strip()


@pytest.mark.parametrize("row", ROWS, ids=_row_id)
def test_vector(row: Row) -> None:
    got = answer(row)
    peer = expected(row, _peer(row))
    if row.differs is None:
        assert got == peer
        return
    assert row.differs.reason in REASONS
    assert got == expected(row, row.differs.ours)
    assert got != peer  # a difference must really be one


def _peer(row: Row) -> object:
    """The peer's answer, as the row states it."""
    if isinstance(row, Fields):
        return row.fields
    if isinstance(row, Valid):
        return row.valid
    if isinstance(row, Order):
        return row.specs
    return row.expected


# -- bookkeeping: nothing is skipped silently ---------------------------------------------
SUITES = {"robfig/cron v3.0.1": robfig_vectors, "croniter 7.0.0": croniter_vectors}


@pytest.mark.parametrize("suite", SUITES)
def test_every_peer_test_is_ported_or_listed(suite: str) -> None:
    module = SUITES[suite]
    tests = set(module.TESTS)
    assert len(tests) == len(module.TESTS)
    ported = {peer_test(row.source) for row in module.ROWS}
    not_ported = set(module.NOT_PORTED)
    assert ported <= tests, ported - tests
    assert not ported & not_ported, ported & not_ported
    assert ported | not_ported == tests, tests - ported - not_ported
    assert set(module.PARTLY) <= ported, set(module.PARTLY) - ported


@pytest.mark.parametrize("suite", SUITES)
def test_the_docs_state_the_coverage(suite: str) -> None:
    module = SUITES[suite]
    row = coverage(suite, module.TESTS, module.ROWS, module.NOT_PORTED, module.PARTLY)
    assert row in DOCS.read_text(), row
    said = " ".join((module.__doc__ or "").split())
    assert f"Not ported: {not_ported(module.TESTS, module.NOT_PORTED)}" in said


def test_the_list_of_croniter_tests_is_the_installed_suite() -> None:
    spec = importlib.util.find_spec("croniter.tests")
    if metadata.version("croniter") != "7.0.0" or spec is None or spec.origin is None:
        pytest.skip("the table is of croniter 7.0.0's suite, which is not the one installed")
    found = set()
    for path in sorted(Path(spec.origin).parent.glob("test_*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                found |= {
                    f"{path.name}::{item.name}"
                    for item in node.body
                    if isinstance(item, ast.FunctionDef) and item.name.startswith("test")
                }
    assert found == set(croniter_vectors.TESTS)


def test_every_difference_is_in_the_docs_table() -> None:
    used = {row.differs.reason for row in ROWS if row.differs is not None}
    assert used == set(REASONS)
    docs = DOCS.read_text()
    table = docs[docs.index("### Where we differ from robfig/cron and croniter") :]
    lines = {
        reason: line
        for line in table.splitlines()
        for reason in REASONS
        if line.startswith(f"| `{reason}` |")
    }
    assert set(lines) == set(REASONS)
    for row in ROWS:
        if row.differs is not None:
            name = peer_test(row.source).partition("::")[2]
            assert name in lines[row.differs.reason], (row.differs.reason, row.source)


def test_fields_are_the_six() -> None:
    assert tuple(_FULL) == FIELDS
