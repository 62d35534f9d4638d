"""robfig/cron v3.0.1's own test vectors, as data.

Ported from the v3 files at the root of github.com/robfig/cron: ``spec_test.go``,
``parser_test.go``, ``constantdelay_test.go`` and the schedule parts of
``cron_test.go``. Each row names its test (and the index in the Go table); times are
written as in the Go source. How they were read for us:

* A spec without ``TZ=`` is parsed by robfig in ``time.Local`` and, by ``Next``, read
  in the zone of the time given; we read such rows in UTC, or, where the time carries
  an offset (``TestNextWithTz``), in the zone that has it (Asia/Kolkata for +05:30).
* ``secondParser`` and ``ParseStandard`` are our one parser: 6 fields with seconds
  first, or 5 fields.
* ``TestRange`` / ``TestField`` / ``TestBits`` call robfig's field reader with made-up
  bounds (0-7, 1-7, 1-3, 3-5); they run here in the minute field, whose bounds hold
  their values, and the rows whose answer depends on the bounds run in a field that
  gives the same answer (noted on the row).
* ``Every(d)`` is our ``@every d``, written in Go's duration syntax.

The runner tests of ``cron_test.go`` (start, stop, remove, panics, timing) are not
schedule vectors; every spec they schedule is a :class:`Valid` row, and what they
check of a schedule (``TestJob``'s order, the time zone tests) is a row of its own.
Not ported: 5 of the 41 tests (runner 5), the runner tests with no schedule of their
own, listed in :data:`NOT_PORTED`; the Cron runner has its own tests
(tests/unit/engine/test_cron.py).
"""

from __future__ import annotations

from .vectors import REJECTED, Differs, Fields, FieldValues, Match, Next, Order, Row, Valid

SPEC = "spec_test.go::"
PARSER = "parser_test.go::"
DELAY = "constantdelay_test.go::"
CRON = "cron_test.go::"

NY = "America/New_York"

# The test functions of the four files, and why those without rows have none.
TESTS: tuple[str, ...] = (
    *(SPEC + t for t in ("TestActivation", "TestNext", "TestErrors", "TestNextWithTz")),
    SPEC + "TestSlash0NoHang",
    *(
        PARSER + t
        for t in (
            "TestRange",
            "TestField",
            "TestAll",
            "TestBits",
            "TestParseScheduleErrors",
            "TestParseSchedule",
            "TestOptionalSecondSchedule",
            "TestNormalizeFields",
            "TestNormalizeFields_Errors",
            "TestStandardSpecSchedule",
            "TestNoDescriptorParser",
        )
    ),
    DELAY + "TestConstantDelayNext",
    *(
        CRON + t
        for t in (
            "TestFuncPanicRecovery",
            "TestJobPanicRecovery",
            "TestNoEntries",
            "TestStopCausesJobsToNotRun",
            "TestAddBeforeRunning",
            "TestAddWhileRunning",
            "TestAddWhileRunningWithDelay",
            "TestRemoveBeforeRunning",
            "TestRemoveWhileRunning",
            "TestSnapshotEntries",
            "TestMultipleEntries",
            "TestRunningJobTwice",
            "TestRunningMultipleSchedules",
            "TestLocalTimezone",
            "TestNonLocalTimezone",
            "TestStopWithoutStart",
            "TestInvalidJobSpec",
            "TestBlockingRun",
            "TestStartNoop",
            "TestJob",
            "TestScheduleAfterRemoval",
            "TestJobWithZeroTimeDoesNotRun",
            "TestStopAndWait",
            "TestMultiThreadedStartAndStop",
        )
    ),
)

_RUNNER = "runner: not a schedule vector (tests/unit/engine/test_cron.py)"
NOT_PORTED: dict[str, str] = {
    CRON + "TestNoEntries": _RUNNER + "; no schedule",
    CRON + "TestStopWithoutStart": _RUNNER + "; no schedule",
    CRON + "TestScheduleAfterRemoval": _RUNNER
    + "; its schedules are the @every 1s / 1h rows of TestRunningMultipleSchedules",
    CRON + "TestJobWithZeroTimeDoesNotRun": _RUNNER
    + "; its schedule is a Go type whose Next gives the zero time (ours: None)",
    CRON + "TestMultiThreadedStartAndStop": _RUNNER + "; no schedule",
}
#: Tests ported for some of their assertions only (none: the runner tests' specs are rows).
PARTLY: dict[str, str] = {}


def _activation(i: int, at: str, spec: str, expected: bool) -> Match:
    return Match(f"{SPEC}TestActivation[{i}]", spec, at, expected)


def _next(
    i: int, start: str, spec: str, expected: str, tz: str = "UTC", differs: Differs | None = None
) -> Next:
    return Next(f"{SPEC}TestNext[{i}]", spec, start, (expected,), tz=tz, differs=differs)


_ALL_DAYS: dict[str, FieldValues | float] = {"day-of-month": "*", "month": "*", "day-of-week": "*"}
_EVERY_5_MIN = {"second": (0,), "minute": (5,), "hour": "*", **_ALL_DAYS}
_EVERY_5_MIN_5_S = _EVERY_5_MIN | {"second": (5,)}
_MIDNIGHT = {"second": (0,), "minute": (0,), "hour": (0,), **_ALL_DAYS}
_ANNUAL = _MIDNIGHT | {"day-of-month": (1,), "month": (1,)}


def _subset(name: str, spec: str, dow: FieldValues) -> Fields:
    """robfig's NewParser(Hour | Dom | Month ...) reads ``5 15 *`` as 05:00 on the 15th."""
    fields: dict[str, FieldValues | float] = {"second": (0,), "minute": (0,), "hour": (5,)}
    fields |= {"day-of-month": (15,), "month": "*", "day-of-week": dow}
    return Fields(
        f"{PARSER}TestNormalizeFields[{name}]",
        spec,
        fields,
        differs=Differs("parser-options", REJECTED),
    )


ROWS: list[Row] = [
    # -- spec_test.go TestActivation: Next(t - 1s) == t ----------------------------------
    _activation(0, "Mon Jul 9 15:00 2012", "0/15 * * * *", True),
    _activation(1, "Mon Jul 9 15:45 2012", "0/15 * * * *", True),
    _activation(2, "Mon Jul 9 15:40 2012", "0/15 * * * *", False),
    _activation(3, "Mon Jul 9 15:05 2012", "5/15 * * * *", True),
    _activation(4, "Mon Jul 9 15:20 2012", "5/15 * * * *", True),
    _activation(5, "Mon Jul 9 15:50 2012", "5/15 * * * *", True),
    _activation(6, "Sun Jul 15 15:00 2012", "0/15 * * Jul *", True),
    _activation(7, "Sun Jul 15 15:00 2012", "0/15 * * Jun *", False),
    _activation(8, "Sun Jul 15 08:30 2012", "30 08 ? Jul Sun", True),
    _activation(9, "Sun Jul 15 08:30 2012", "30 08 15 Jul ?", True),
    _activation(10, "Mon Jul 16 08:30 2012", "30 08 ? Jul Sun", False),
    _activation(11, "Mon Jul 16 08:30 2012", "30 08 15 Jul ?", False),
    _activation(12, "Mon Jul 9 15:00 2012", "@hourly", True),
    _activation(13, "Mon Jul 9 15:04 2012", "@hourly", False),
    _activation(14, "Mon Jul 9 15:00 2012", "@daily", False),
    _activation(15, "Mon Jul 9 00:00 2012", "@daily", True),
    _activation(16, "Mon Jul 9 00:00 2012", "@weekly", False),
    _activation(17, "Sun Jul 8 00:00 2012", "@weekly", True),
    _activation(18, "Sun Jul 8 01:00 2012", "@weekly", False),
    _activation(19, "Sun Jul 8 00:00 2012", "@monthly", False),
    _activation(20, "Sun Jul 1 00:00 2012", "@monthly", True),
    _activation(21, "Sun Jul 15 00:00 2012", "* * 1,15 * Sun", True),
    _activation(22, "Fri Jun 15 00:00 2012", "* * 1,15 * Sun", True),
    _activation(23, "Wed Aug 1 00:00 2012", "* * 1,15 * Sun", True),
    _activation(24, "Sun Jul 15 00:00 2012", "* * */10 * Sun", True),
    _activation(25, "Sun Jul 15 00:00 2012", "* * * * Mon", False),
    _activation(26, "Mon Jul 9 00:00 2012", "* * 1,15 * *", False),
    _activation(27, "Sun Jul 15 00:00 2012", "* * 1,15 * *", True),
    _activation(28, "Sun Jul 15 00:00 2012", "* * */2 * Sun", True),
    # -- spec_test.go TestNext -------------------------------------------------------------
    _next(0, "Mon Jul 9 14:45 2012", "0 0/15 * * * *", "Mon Jul 9 15:00 2012"),
    _next(1, "Mon Jul 9 14:59 2012", "0 0/15 * * * *", "Mon Jul 9 15:00 2012"),
    _next(2, "Mon Jul 9 14:59:59 2012", "0 0/15 * * * *", "Mon Jul 9 15:00 2012"),
    _next(3, "Mon Jul 9 15:45 2012", "0 20-35/15 * * * *", "Mon Jul 9 16:20 2012"),
    _next(4, "Mon Jul 9 23:46 2012", "0 */15 * * * *", "Tue Jul 10 00:00 2012"),
    _next(5, "Mon Jul 9 23:45 2012", "0 20-35/15 * * * *", "Tue Jul 10 00:20 2012"),
    _next(6, "Mon Jul 9 23:35:51 2012", "15/35 20-35/15 * * * *", "Tue Jul 10 00:20:15 2012"),
    _next(7, "Mon Jul 9 23:35:51 2012", "15/35 20-35/15 1/2 * * *", "Tue Jul 10 01:20:15 2012"),
    _next(8, "Mon Jul 9 23:35:51 2012", "15/35 20-35/15 10-12 * * *", "Tue Jul 10 10:20:15 2012"),
    _next(9, "Mon Jul 9 23:35:51 2012", "15/35 20-35/15 1/2 */2 * *", "Thu Jul 11 01:20:15 2012"),
    _next(10, "Mon Jul 9 23:35:51 2012", "15/35 20-35/15 * 9-20 * *", "Wed Jul 10 00:20:15 2012"),
    _next(11, "Mon Jul 9 23:35:51 2012", "15/35 20-35/15 * 9-20 Jul *", "Wed Jul 10 00:20:15 2012"),
    _next(12, "Mon Jul 9 23:35 2012", "0 0 0 9 Apr-Oct ?", "Thu Aug 9 00:00 2012"),
    _next(13, "Mon Jul 9 23:35 2012", "0 0 0 */5 Apr,Aug,Oct Mon", "Tue Aug 1 00:00 2012"),
    _next(14, "Mon Jul 9 23:35 2012", "0 0 0 */5 Oct Mon", "Mon Oct 1 00:00 2012"),
    _next(15, "Mon Jul 9 23:35 2012", "0 0 0 * Feb Mon", "Mon Feb 4 00:00 2013"),
    _next(16, "Mon Jul 9 23:35 2012", "0 0 0 * Feb Mon/2", "Fri Feb 1 00:00 2013"),
    _next(17, "Mon Dec 31 23:59:45 2012", "0 * * * * *", "Tue Jan 1 00:00:00 2013"),
    _next(18, "Mon Jul 9 23:35 2012", "0 0 0 29 Feb ?", "Mon Feb 29 00:00 2016"),
    # Daylight saving time 2am EST (-5) -> 3am EDT (-4)
    _next(
        19,
        "2012-03-11T00:00:00-0500",
        "TZ=America/New_York 0 30 2 11 Mar ?",
        "2013-03-11T02:30:00-0400",
        differs=Differs("dst-gap", ("2012-03-11T03:00:00-0400",)),
    ),
    _next(
        20,
        "2012-03-11T00:00:00-0500",
        "TZ=America/New_York 0 0 * * * ?",
        "2012-03-11T01:00:00-0500",
    ),
    _next(
        21,
        "2012-03-11T01:00:00-0500",
        "TZ=America/New_York 0 0 * * * ?",
        "2012-03-11T03:00:00-0400",
    ),
    _next(
        22,
        "2012-03-11T03:00:00-0400",
        "TZ=America/New_York 0 0 * * * ?",
        "2012-03-11T04:00:00-0400",
    ),
    _next(
        23,
        "2012-03-11T04:00:00-0400",
        "TZ=America/New_York 0 0 * * * ?",
        "2012-03-11T05:00:00-0400",
    ),
    _next(
        24,
        "2012-03-11T00:00:00-0500",
        "CRON_TZ=America/New_York 0 0 * * * ?",
        "2012-03-11T01:00:00-0500",
    ),
    _next(
        25,
        "2012-03-11T01:00:00-0500",
        "CRON_TZ=America/New_York 0 0 * * * ?",
        "2012-03-11T03:00:00-0400",
    ),
    _next(
        26,
        "2012-03-11T03:00:00-0400",
        "CRON_TZ=America/New_York 0 0 * * * ?",
        "2012-03-11T04:00:00-0400",
    ),
    _next(
        27,
        "2012-03-11T04:00:00-0400",
        "CRON_TZ=America/New_York 0 0 * * * ?",
        "2012-03-11T05:00:00-0400",
    ),
    _next(
        28,
        "2012-03-11T00:00:00-0500",
        "TZ=America/New_York 0 0 1 * * ?",
        "2012-03-11T01:00:00-0500",
    ),
    _next(
        29,
        "2012-03-11T01:00:00-0500",
        "TZ=America/New_York 0 0 1 * * ?",
        "2012-03-12T01:00:00-0400",
    ),
    # 2am nightly job (skipped by robfig; at the end of the gap by Vixie cron)
    _next(
        30,
        "2012-03-11T00:00:00-0500",
        "TZ=America/New_York 0 0 2 * * ?",
        "2012-03-12T02:00:00-0400",
        differs=Differs("dst-gap", ("2012-03-11T03:00:00-0400",)),
    ),
    # Daylight saving time 2am EDT (-4) => 1am EST (-5)
    _next(
        31,
        "2012-11-04T00:00:00-0400",
        "TZ=America/New_York 0 30 2 04 Nov ?",
        "2012-11-04T02:30:00-0500",
    ),
    _next(
        32,
        "2012-11-04T01:45:00-0400",
        "TZ=America/New_York 0 30 1 04 Nov ?",
        "2012-11-04T01:30:00-0500",
        differs=Differs("dst-repeat", ("2013-11-04T01:30:00-0500",)),
    ),
    _next(
        33,
        "2012-11-04T00:00:00-0400",
        "TZ=America/New_York 0 0 * * * ?",
        "2012-11-04T01:00:00-0400",
    ),
    _next(
        34,
        "2012-11-04T01:00:00-0400",
        "TZ=America/New_York 0 0 * * * ?",
        "2012-11-04T01:00:00-0500",
    ),
    _next(
        35,
        "2012-11-04T01:00:00-0500",
        "TZ=America/New_York 0 0 * * * ?",
        "2012-11-04T02:00:00-0500",
    ),
    # 1am nightly job (runs twice in robfig; once by Vixie cron)
    _next(
        36,
        "2012-11-04T00:00:00-0400",
        "TZ=America/New_York 0 0 1 * * ?",
        "2012-11-04T01:00:00-0400",
    ),
    _next(
        37,
        "2012-11-04T01:00:00-0400",
        "TZ=America/New_York 0 0 1 * * ?",
        "2012-11-04T01:00:00-0500",
        differs=Differs("dst-repeat", ("2012-11-05T01:00:00-0500",)),
    ),
    _next(
        38,
        "2012-11-04T01:00:00-0500",
        "TZ=America/New_York 0 0 1 * * ?",
        "2012-11-05T01:00:00-0500",
    ),
    _next(
        39,
        "2012-11-04T00:00:00-0400",
        "TZ=America/New_York 0 0 2 * * ?",
        "2012-11-04T02:00:00-0500",
    ),
    _next(
        40,
        "2012-11-04T02:00:00-0500",
        "TZ=America/New_York 0 0 2 * * ?",
        "2012-11-05T02:00:00-0500",
    ),
    _next(
        41,
        "2012-11-04T00:00:00-0400",
        "TZ=America/New_York 0 0 3 * * ?",
        "2012-11-04T03:00:00-0500",
    ),
    _next(
        42,
        "2012-11-04T03:00:00-0500",
        "TZ=America/New_York 0 0 3 * * ?",
        "2012-11-05T03:00:00-0500",
    ),
    # The same with the zone on the time: a spec without TZ= is read in the time's zone.
    _next(43, "2012-11-04T00:00:00-0400", "0 0 * * * ?", "2012-11-04T01:00:00-0400", tz=NY),
    _next(44, "2012-11-04T01:00:00-0400", "0 0 * * * ?", "2012-11-04T01:00:00-0500", tz=NY),
    _next(45, "2012-11-04T01:00:00-0500", "0 0 * * * ?", "2012-11-04T02:00:00-0500", tz=NY),
    _next(46, "2012-11-04T00:00:00-0400", "0 0 1 * * ?", "2012-11-04T01:00:00-0400", tz=NY),
    _next(
        47,
        "2012-11-04T01:00:00-0400",
        "0 0 1 * * ?",
        "2012-11-04T01:00:00-0500",
        tz=NY,
        differs=Differs("dst-repeat", ("2012-11-05T01:00:00-0500",)),
    ),
    _next(48, "2012-11-04T01:00:00-0500", "0 0 1 * * ?", "2012-11-05T01:00:00-0500", tz=NY),
    _next(49, "2012-11-04T00:00:00-0400", "0 0 2 * * ?", "2012-11-04T02:00:00-0500", tz=NY),
    _next(50, "2012-11-04T02:00:00-0500", "0 0 2 * * ?", "2012-11-05T02:00:00-0500", tz=NY),
    _next(51, "2012-11-04T00:00:00-0400", "0 0 3 * * ?", "2012-11-04T03:00:00-0500", tz=NY),
    _next(52, "2012-11-04T03:00:00-0500", "0 0 3 * * ?", "2012-11-05T03:00:00-0500", tz=NY),
    # Unsatisfiable: robfig gives the zero time.
    _next(
        53, "Mon Jul 9 23:35 2012", "0 0 0 30 Feb ?", "", differs=Differs("never-fires", REJECTED)
    ),
    _next(
        54, "Mon Jul 9 23:35 2012", "0 0 0 31 Apr ?", "", differs=Differs("never-fires", REJECTED)
    ),
    # Monthly job
    _next(55, "2012-11-04T00:00:00-0400", "0 0 3 3 * ?", "2012-12-03T03:00:00-0500", tz=NY),
    # DST making midnight not a valid time (robfig/cron#157)
    _next(
        56,
        "2018-10-17T05:00:00-0400",
        "TZ=America/Sao_Paulo 0 0 9 10 * ?",
        "2018-11-10T06:00:00-0500",
    ),
    _next(
        57,
        "2018-02-14T05:00:00-0500",
        "TZ=America/Sao_Paulo 0 0 9 22 * ?",
        "2018-02-22T07:00:00-0500",
    ),
    # -- spec_test.go TestErrors, TestSlash0NoHang --------------------------------------------
    Valid(SPEC + "TestErrors[0]", "xyz", False),
    Valid(SPEC + "TestErrors[1]", "60 0 * * *", False),
    Valid(SPEC + "TestErrors[2]", "0 60 * * *", False),
    Valid(SPEC + "TestErrors[3]", "0 0 * * XYZ", False),
    Valid(SPEC + "TestSlash0NoHang", "TZ=America/New_York 15/0 * * * *", False),
    # -- spec_test.go TestNextWithTz: read in the zone of the time (+05:30) --------------------
    Next(
        SPEC + "TestNextWithTz[0]",
        "14 14 * * *",
        "2016-01-03T13:09:03+0530",
        ("2016-01-03T14:14:00+0530",),
        tz="Asia/Kolkata",
    ),
    Next(
        SPEC + "TestNextWithTz[1]",
        "14 14 * * ?",
        "2016-01-03T04:09:03+0530",
        ("2016-01-03T14:14:00+0530",),
        tz="Asia/Kolkata",
    ),
    Next(
        SPEC + "TestNextWithTz[2]",
        "14 14 * * *",
        "2016-01-03T14:09:03+0530",
        ("2016-01-03T14:14:00+0530",),
        tz="Asia/Kolkata",
    ),
    Next(
        SPEC + "TestNextWithTz[3]",
        "14 14 * * ?",
        "2016-01-03T14:00:00+0530",
        ("2016-01-03T14:14:00+0530",),
        tz="Asia/Kolkata",
    ),
    # -- parser_test.go TestRange (bounds 0-7 unless said) -------------------------------------
    Fields(PARSER + "TestRange[0]", "5 * * * *", {"minute": (5,)}),
    Fields(PARSER + "TestRange[1]", "0 * * * *", {"minute": (0,)}),
    Fields(PARSER + "TestRange[2]", "7 * * * *", {"minute": (7,)}),
    Fields(PARSER + "TestRange[3]", "5-5 * * * *", {"minute": (5,)}),
    Fields(PARSER + "TestRange[4]", "5-6 * * * *", {"minute": (5, 6)}),
    Fields(PARSER + "TestRange[5]", "5-7 * * * *", {"minute": (5, 6, 7)}),
    Fields(PARSER + "TestRange[6]", "5-6/2 * * * *", {"minute": (5,)}),
    Fields(PARSER + "TestRange[7]", "5-7/2 * * * *", {"minute": (5, 7)}),
    Fields(PARSER + "TestRange[8]", "5-7/1 * * * *", {"minute": (5, 6, 7)}),
    # bounds 1-3: in the month field (1-12), "*" is every month and "*/2" every other one
    Fields(PARSER + "TestRange[9]", "* * * * *", {"month": "*"}),
    Fields(PARSER + "TestRange[10]", "* * * */2 *", {"month": (1, 3, 5, 7, 9, 11)}),
    Valid(PARSER + "TestRange[11]", "5--5 * * * *", False),
    Valid(PARSER + "TestRange[12]", "* * * jan-x *", False),
    Valid(PARSER + "TestRange[13]", "2-x * * * *", False),
    Valid(PARSER + "TestRange[14]", "*/-12 * * * *", False),
    Valid(PARSER + "TestRange[15]", "*//2 * * * *", False),
    # below / above the bounds 3-5: below day-of-month's 1, above minute's 59
    Valid(PARSER + "TestRange[16]", "* * 0 * *", False),
    Valid(PARSER + "TestRange[17]", "60 * * * *", False),
    Valid(PARSER + "TestRange[18]", "5-3 * * * *", False, differs=Differs("wrap", True)),
    Valid(PARSER + "TestRange[19]", "*/0 * * * *", False),
    # -- parser_test.go TestField (bounds 1-7) ---------------------------------------------
    Fields(PARSER + "TestField[0]", "5 * * * *", {"minute": (5,)}),
    Fields(PARSER + "TestField[1]", "5,6 * * * *", {"minute": (5, 6)}),
    Fields(PARSER + "TestField[2]", "5,6,7 * * * *", {"minute": (5, 6, 7)}),
    Fields(PARSER + "TestField[3]", "1,5-7/2,3 * * * *", {"minute": (1, 3, 5, 7)}),
    # -- parser_test.go TestAll --------------------------------------------------------------
    Fields(PARSER + "TestAll[0]", "* * * * *", {"minute": tuple(range(60))}),
    Fields(PARSER + "TestAll[1]", "* * * * *", {"hour": tuple(range(24))}),
    Fields(PARSER + "TestAll[2]", "* * * * *", {"day-of-month": tuple(range(1, 32))}),
    Fields(PARSER + "TestAll[3]", "* * * * *", {"month": tuple(range(1, 13))}),
    Fields(PARSER + "TestAll[4]", "* * * * *", {"day-of-week": tuple(range(7))}),
    # -- parser_test.go TestBits: getBits(min, max, step) ------------------------------------
    Fields(PARSER + "TestBits[0]", "0-0/1 * * * *", {"minute": (0,)}),
    Fields(PARSER + "TestBits[1]", "1-1/1 * * * *", {"minute": (1,)}),
    Fields(PARSER + "TestBits[2]", "1-5/2 * * * *", {"minute": (1, 3, 5)}),
    Fields(PARSER + "TestBits[3]", "1-4/2 * * * *", {"minute": (1, 3)}),
    # -- parser_test.go TestParseScheduleErrors (secondParser) ------------------------------
    Valid(PARSER + "TestParseScheduleErrors[0]", "* 5 j * * *", False),
    Valid(PARSER + "TestParseScheduleErrors[1]", "@every Xm", False),
    Valid(PARSER + "TestParseScheduleErrors[2]", "@unrecognized", False),
    Valid(PARSER + "TestParseScheduleErrors[3]", "* * * *", False),
    Valid(PARSER + "TestParseScheduleErrors[4]", "", False),
    # -- parser_test.go TestParseSchedule ------------------------------------------------------
    Fields(PARSER + "TestParseSchedule[0]", "0 5 * * * *", _EVERY_5_MIN),
    Fields(PARSER + "TestParseSchedule[1]", "5 * * * *", _EVERY_5_MIN),
    Fields(PARSER + "TestParseSchedule[2]", "CRON_TZ=UTC  0 5 * * * *", _EVERY_5_MIN),
    Fields(PARSER + "TestParseSchedule[3]", "CRON_TZ=UTC  5 * * * *", _EVERY_5_MIN),
    Fields(
        PARSER + "TestParseSchedule[4]",
        "CRON_TZ=Asia/Tokyo 0 5 * * * *",
        _EVERY_5_MIN,
        tz="Asia/Tokyo",
    ),
    Fields(PARSER + "TestParseSchedule[5]", "@every 5m", {"every": 300.0}),
    Fields(PARSER + "TestParseSchedule[6]", "@midnight", _MIDNIGHT),
    Fields(PARSER + "TestParseSchedule[7]", "TZ=UTC  @midnight", _MIDNIGHT),
    Fields(PARSER + "TestParseSchedule[8]", "TZ=Asia/Tokyo @midnight", _MIDNIGHT, tz="Asia/Tokyo"),
    Fields(PARSER + "TestParseSchedule[9]", "@yearly", _ANNUAL),
    Fields(PARSER + "TestParseSchedule[10]", "@annually", _ANNUAL),
    Fields(PARSER + "TestParseSchedule[11]", "* 5 * * * *", _EVERY_5_MIN | {"second": "*"}),
    # -- parser_test.go TestOptionalSecondSchedule -------------------------------------------
    Fields(PARSER + "TestOptionalSecondSchedule[0]", "0 5 * * * *", _EVERY_5_MIN),
    Fields(PARSER + "TestOptionalSecondSchedule[1]", "5 5 * * * *", _EVERY_5_MIN_5_S),
    Fields(PARSER + "TestOptionalSecondSchedule[2]", "5 * * * *", _EVERY_5_MIN),
    # -- parser_test.go TestNormalizeFields: robfig's parser options -------------------------
    Fields(PARSER + "TestNormalizeFields[AllFields_NoOptional]", "0 5 * * * *", _EVERY_5_MIN),
    Fields(
        PARSER + "TestNormalizeFields[AllFields_SecondOptional_Provided]",
        "0 5 * * * *",
        _EVERY_5_MIN,
    ),
    Fields(
        PARSER + "TestNormalizeFields[AllFields_SecondOptional_NotProvided]",
        "5 * * * *",
        _EVERY_5_MIN,
    ),
    _subset("SubsetFields_NoOptional", "5 15 *", "*"),
    _subset("SubsetFields_DowOptional_Provided", "5 15 * 4", (4,)),
    _subset("SubsetFields_DowOptional_NotProvided", "5 15 *", "*"),
    _subset("SubsetFields_SecondOptional_NotProvided", "5 15 *", "*"),
    # -- parser_test.go TestNormalizeFields_Errors -----------------------------------------
    Valid(
        PARSER + "TestNormalizeFields_Errors[TwoOptionals]",
        "0 5 * * * *",
        False,
        differs=Differs("parser-options", True),
    ),
    Valid(PARSER + "TestNormalizeFields_Errors[TooManyFields]", "0 5 * *", False),
    Valid(PARSER + "TestNormalizeFields_Errors[NoFields]", "", False),
    Valid(PARSER + "TestNormalizeFields_Errors[TooFewFields]", "*", False),
    # -- parser_test.go TestStandardSpecSchedule ---------------------------------------------
    Fields(PARSER + "TestStandardSpecSchedule[0]", "5 * * * *", _EVERY_5_MIN),
    Fields(PARSER + "TestStandardSpecSchedule[1]", "@every 5m", {"every": 300.0}),
    Valid(PARSER + "TestStandardSpecSchedule[2]", "5 j * * *", False),
    Valid(PARSER + "TestStandardSpecSchedule[3]", "* * * *", False),
    # -- parser_test.go TestNoDescriptorParser: NewParser(Minute | Hour) ---------------------
    Valid(
        PARSER + "TestNoDescriptorParser",
        "@every 1m",
        False,
        differs=Differs("parser-options", True),
    ),
    # -- constantdelay_test.go TestConstantDelayNext: Every(d).Next(t) -------------------------
    Next(
        DELAY + "TestConstantDelayNext[0]",
        "@every 15m50ns",
        "Mon Jul 9 14:45 2012",
        ("Mon Jul 9 15:00 2012",),
        differs=Differs("every-ms", REJECTED),
    ),
    Next(
        DELAY + "TestConstantDelayNext[1]",
        "@every 15m",
        "Mon Jul 9 14:59 2012",
        ("Mon Jul 9 15:14 2012",),
    ),
    Next(
        DELAY + "TestConstantDelayNext[2]",
        "@every 15m",
        "Mon Jul 9 14:59:59 2012",
        ("Mon Jul 9 15:14:59 2012",),
    ),
    Next(
        DELAY + "TestConstantDelayNext[3]",
        "@every 35m",
        "Mon Jul 9 15:45 2012",
        ("Mon Jul 9 16:20 2012",),
    ),
    Next(
        DELAY + "TestConstantDelayNext[4]",
        "@every 14m",
        "Mon Jul 9 23:46 2012",
        ("Tue Jul 10 00:00 2012",),
    ),
    Next(
        DELAY + "TestConstantDelayNext[5]",
        "@every 35m",
        "Mon Jul 9 23:45 2012",
        ("Tue Jul 10 00:20 2012",),
    ),
    Next(
        DELAY + "TestConstantDelayNext[6]",
        "@every 44m24s",
        "Mon Jul 9 23:35:51 2012",
        ("Tue Jul 10 00:20:15 2012",),
    ),
    Next(
        DELAY + "TestConstantDelayNext[7]",
        "@every 25h44m24s",
        "Mon Jul 9 23:35:51 2012",
        ("Thu Jul 11 01:20:15 2012",),
    ),
    Next(
        DELAY + "TestConstantDelayNext[8]",
        "@every 2184h25m",
        "Mon Jul 9 23:35 2012",
        ("Thu Oct 9 00:00 2012",),
    ),
    Next(
        DELAY + "TestConstantDelayNext[9]",
        "@every 15s",
        "Mon Dec 31 23:59:45 2012",
        ("Tue Jan 1 00:00:00 2013",),
    ),
    Next(
        DELAY + "TestConstantDelayNext[10]",
        "@every 15m50ns",
        "Mon Jul 9 14:45 2012",
        ("Mon Jul 9 15:00 2012",),
        differs=Differs("every-ms", REJECTED),
    ),
    Next(
        DELAY + "TestConstantDelayNext[11]",
        "@every 15ms",
        "Mon Jul 9 14:45:00 2012",
        ("Mon Jul 9 14:45:01 2012",),
        differs=Differs("every-ms", ("Mon Jul 9 14:45:00.015 2012",)),
    ),
    Next(
        DELAY + "TestConstantDelayNext[12]",
        "@every 15m",
        "Mon Jul 9 14:45:00.005 2012",
        ("Mon Jul 9 15:00 2012",),
        differs=Differs("every-ms", ("Mon Jul 9 15:00:00.005 2012",)),
    ),
    Next(
        DELAY + "TestConstantDelayNext[13]",
        "@every 15m50ns",
        "Mon Jul 9 14:45:00.005 2012",
        ("Mon Jul 9 15:00 2012",),
        differs=Differs("every-ms", REJECTED),
    ),
    # -- cron_test.go: the specs the runner tests schedule -----------------------------------
    Valid(CRON + "TestFuncPanicRecovery", "* * * * * ?", True),
    Valid(CRON + "TestJobPanicRecovery", "* * * * * ?", True),
    Valid(CRON + "TestStopCausesJobsToNotRun", "* * * * * ?", True),
    Valid(CRON + "TestAddBeforeRunning", "* * * * * ?", True),
    Valid(CRON + "TestAddWhileRunning", "* * * * * ?", True),
    Valid(CRON + "TestAddWhileRunningWithDelay", "* * * * * *", True),
    Valid(CRON + "TestRemoveBeforeRunning", "* * * * * ?", True),
    Valid(CRON + "TestRemoveWhileRunning", "* * * * * ?", True),
    Valid(CRON + "TestBlockingRun", "* * * * * ?", True),
    Valid(CRON + "TestStartNoop", "* * * * * ?", True),
    Valid(CRON + "TestStopAndWait", "* * * * * *", True),
    Valid(CRON + "TestInvalidJobSpec", "this will not parse", False),
    # @every 2s fires at the 2-second mark, however often Entries() is called.
    Next(
        CRON + "TestSnapshotEntries",
        "@every 2s",
        "Mon Jul 9 14:45 2012",
        ("Mon Jul 9 14:45:02 2012",),
    ),
    # Far-future entries sort after one due every second.
    Valid(CRON + "TestMultipleEntries[0]", "0 0 0 1 1 ?", True),
    Valid(CRON + "TestMultipleEntries[1]", "0 0 0 31 12 ?", True),
    Order(
        CRON + "TestMultipleEntries",
        "Mon Jul 9 14:45 2012",
        ("* * * * * ?", "0 0 0 31 12 ?", "0 0 0 1 1 ?"),
    ),
    # A job every second fires twice in two seconds; so does Every(time.Second).
    Next(
        CRON + "TestRunningJobTwice",
        "* * * * * ?",
        "Mon Jul 9 14:45 2012",
        ("Mon Jul 9 14:45:01 2012", "Mon Jul 9 14:45:02 2012"),
    ),
    Next(
        CRON + "TestRunningMultipleSchedules",
        "@every 1s",
        "Mon Jul 9 14:45 2012",
        ("Mon Jul 9 14:45:01 2012", "Mon Jul 9 14:45:02 2012"),
    ),
    Valid(CRON + "TestRunningMultipleSchedules[Every(time.Minute)]", "@every 1m", True),
    Valid(CRON + "TestRunningMultipleSchedules[Every(time.Hour)]", "@every 1h", True),
    # "%d,%d %d %d %d %d ?" from now: fires at now + 1 s and now + 2 s, in the cron's zone.
    Next(
        CRON + "TestLocalTimezone",
        "31,32 4 15 9 7 ?",
        "Mon Jul 9 15:04:30 2012",
        ("Mon Jul 9 15:04:31 2012", "Mon Jul 9 15:04:32 2012"),
    ),
    Next(
        CRON + "TestNonLocalTimezone",
        "31,32 4 15 9 7 ?",
        "Mon Jul 9 15:04:30 2012",
        ("Mon Jul 9 15:04:31 2012", "Mon Jul 9 15:04:32 2012"),
        tz="Atlantic/Cape_Verde",
    ),
    # TestJob: entries in order of their next run. robfig's Every(5s + 5ns) is 5s (it
    # drops what is under a second); "0 0 0 30 Feb ?" never runs and sorts last.
    Order(
        CRON + "TestJob",
        "Mon Jul 9 14:45 2012",
        ("* * * * * ?", "@every 5s", "@every 5m", "0 0 0 1 1 ?", "1 0 0 1 1 ?"),
    ),
    Valid(CRON + "TestJob[job4]", "@every 5s5ns", True, differs=Differs("every-ms", False)),
    Valid(CRON + "TestJob[job0]", "0 0 0 30 Feb ?", True, differs=Differs("never-fires", False)),
]
