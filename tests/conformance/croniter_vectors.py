"""croniter 7.0.0's own test vectors, as data (the standard 5- and 6-field parts).

Ported from croniter's test suite (``croniter/tests/`` in the 7.0.0 release, the
version this project depends on): ``test_croniter.py``, ``test_croniter_range.py``,
``test_croniter_dst_repetition.py``, ``test_croniter_speed.py``,
``test_croniter_random.py`` and ``test_croniter_hash.py``; 264 test functions (the
hash file defines ``test_expand_month_days`` twice; the second one counts). Each row
names its test. How they were read for us:

* croniter's 6-field form has the seconds *last*; ours has them first, as robfig/cron
  and ``second_at_beginning=True``. Such rows give croniter's text as ``peer``.
* A naive ``datetime`` is read in UTC (croniter turns it into a UTC timestamp); an
  aware one is that instant. pytz and dateutil variants of a test run the same
  vectors with zoneinfo.
* ``croniter.match(expr, t)`` is an occurrence in ``(t - precision, t]`` (precision
  60 s for 5 fields, 1 s for 6); ``match_range`` the same up to its second bound;
  ``croniter_range`` every occurrence between its bounds.
* ``expanded[field]`` is our ``CronExpression.values(field)``; croniter's ``["*"]``
  is every value of the field.
* Where a test asserts only some attributes (``n1.day == 25``), the row gives the
  whole time croniter 7.0.0 returns, which satisfies them.

Not ported: 161 of the 264 tests (extension 113, option 27, backwards 14, API 6,
timing 1), each listed in :data:`NOT_PORTED` with its reason: croniter's extensions
``L``, ``W``, ``#``, ``H``, ``R`` and the year field; searches backwards
(``get_prev``; we have no previous-occurrence API); croniter's options
(``day_or=False``, ``implement_cron_bug``, ``expand_from_start_time``,
``max_years_between_matches``, ``strict_year``); its API (return types,
``get_current``, iterator state, subclassing, internal helpers); and its timing test
(bench/schedules.py compares speed). A test with both kinds of assertion is ported for
its standard, forward ones (47 of the 103 ported); :data:`PARTLY` says what was left
out of each.
"""

from __future__ import annotations

from datetime import date, timedelta

from .vectors import REJECTED, Differs, Fields, Match, Next, Range, Row, Valid

T = "test_croniter.py::"
RANGE = "test_croniter_range.py::"
DST = "test_croniter_dst_repetition.py::"
SPEED = "test_croniter_speed.py::"
RANDOM = "test_croniter_random.py::"
HASH = "test_croniter_hash.py::"


def _days(days: str, start: str = "2024-01") -> tuple[str, ...]:
    """Day numbers as croniter's range tests list them (``"2 3 4"``), from ``start``'s
    month on (a day no later than the one before it is in the next month)."""
    year, month = map(int, start.split("-"))
    out, last = [], 0
    for day in map(int, days.split()):
        if day <= last:
            year, month = (year + 1, 1) if month == 12 else (year, month + 1)
        out.append(date(year, month, day).isoformat())
        last = day
    return tuple(out)


def _months(year_months: str) -> tuple[str, ...]:
    """croniter's ``"24 2, 24 3"`` (two-digit year, month) as the first of each month."""
    out = []
    for ym in year_months.split(","):
        yy, mm = ym.split()
        out.append(f"20{yy}-{int(mm):02d}-01")
    return tuple(out)


def _weekly(first: str, count: int) -> tuple[str, ...]:
    day = date.fromisoformat(first)
    return tuple((day + timedelta(weeks=i)).isoformat() for i in range(count))


def _hops(source: str, spec: str, peer: str, pairs: tuple[tuple[str, str], ...]) -> list[Row]:
    """croniter's loops that restart from each result plus a day: one row per step."""
    return [
        Next(f"{source}[{i}]", spec, start, (end,), peer=peer)
        for i, (start, end) in enumerate(pairs)
    ]


_ALL_DAYS_FROM_2_JAN = _days(" ".join(map(str, range(2, 32))))
# The 30 days "0 0 * * Thu-Tue/2" gives from 2024-01-01 (Thu, Sat, Mon).
_THU_SAT_MON = _days("4 6 8 11 13 15 18 20 22 25 27 29 1 3 5 8 10 12 15 17")
_THU_SAT_MON += _days("19 22 24 26 29 2 4 7 9 11", start="2024-02")


def _sunday_forms(
    name: str, spec: str, days: tuple[str, ...], differs: Differs | None = None
) -> list[Row]:
    """croniter's ``_test_sunday_ranges``: the spec as written and with Sun as 7 and 0."""
    forms = (spec, spec.lower().replace("sun", "7"), spec.lower().replace("sun", "0"))
    return [
        Next(f"{T}{name}[{form}]", form, "2024-01-01", days, differs=differs)
        for form in dict.fromkeys(forms)
    ]


# -- the tests, and what is not ported ------------------------------------------------------
_EXT = "extension: "
_PREV = "backwards: get_prev only"
_OPT = "option: "
_API = "API: "

NOT_PORTED: dict[str, str] = {
    T + "test_day2": _PREV,
    T + "test_nth_weekday": _EXT + "#",
    T + "test_weekday_day_or_with_impossible_day_of_month_prev": _PREV,
    T + "test_nth_weekday_with_restricted_day_of_month_still_raises": _EXT + "#",
    T + "test_nearest_weekday_with_restricted_day_of_week_still_raises": _EXT + "W",
    T + "test_both_union_sides_unsatisfiable_reports_direction": _EXT + "year field",
    T + "test_weekday_day_and": _OPT + "day_or=False",
    T + "test_last_day_of_month": _EXT + "L",
    T + "test_last_day_of_month_with_leap_year": _EXT + "L",
    T + "test_last_day_of_month_with_leap_year_century_exception": _EXT + "L",
    T + "test_range_with_uppercase_last_day_of_month": _EXT + "L",
    T + "test_prev_last_day_of_month": _EXT + "L",
    T + "test_step_from_field_max_expand_from_start_time": _OPT + "expand_from_start_time",
    T + "test_prev_minute": _PREV,
    T + "test_prev_day_of_month_with_crossing": _PREV,
    T + "test_prev_weekday": _PREV,
    T + "test_prev_nth_weekday": _EXT + "#",
    T + "test_prev_weekday2": _PREV,
    T + "test_bug1": _PREV,
    T + "test_previous_hour": _PREV,
    T + "test_previous_day": _PREV,
    T + "test_previous_month": _PREV,
    T + "test_previous_dow": _PREV,
    T + "test_get_current": _API + "get_current",
    T + "test_init_no_start_time": _API + "a croniter without a start time",
    T + "test_is_valid_strict_with_year": _EXT + "year field",
    T + "test_is_valid_strict_year_parameter": _OPT + "strict_year",
    T + "test_nearest_weekday_basic": _EXT + "W",
    T + "test_nearest_weekday_saturday": _EXT + "W",
    T + "test_nearest_weekday_sunday": _EXT + "W",
    T + "test_nearest_weekday_first_saturday": _EXT + "W",
    T + "test_nearest_weekday_last_day_sunday": _EXT + "W",
    T + "test_nearest_weekday_end_of_month_boundary": _EXT + "W",
    T + "test_nearest_weekday_wn_format": _EXT + "W",
    T + "test_nearest_weekday_get_prev": _EXT + "W",
    T + "test_nearest_weekday_is_valid": _EXT + "W",
    T + "test_nearest_weekday_iteration": _EXT + "W",
    T + "test_mixdow": _EXT + "L",
    T + "test_match_handle_bad_cron": _EXT + "# and year field",
    T + "test_nth_wday_simple": _EXT + "# (croniter's helper)",
    T + "test_nth_as_last_wday_simple": _EXT + "L (croniter's helper)",
    T + "test_wdom_core_leap_year": _EXT + "L (croniter's helper)",
    T + "test_lwom_friday": _EXT + "L",
    T + "test_lwom_friday_2hours": _EXT + "L",
    T + "test_lwom_friday_2xh_2xm": _EXT + "L",
    T + "test_lwom_saturday_rev": _EXT + "L",
    T + "test_lwom_tue_thu": _EXT + "L",
    T + "test_lwom_mixup_firstlast_sat": _EXT + "L and #",
    T + "test_lwom_mixup_4th_and_last": _EXT + "L and #",
    T + "test_nth_out_of_range": _EXT + "#",
    T + "test_nth_out_of_range_without_asserts": _EXT + "#",
    T + "test_last_out_of_range": _EXT + "L",
    T + "test_year": _EXT + "year field",
    T + "test_year_with_other_field": _EXT + "year field",
    T + "test_year_get_prev": _EXT + "year field",
    T + "test_year_match": _EXT + "year field",
    T + "test_year_bad_date_error": _EXT + "year field",
    T + "test_year_with_second_at_beginning": _EXT + "year field",
    T + "test_invalid_year": _EXT + "year field",
    T + "test_issue_47": _PREV,
    T + "test_issue_142_dow": _EXT + "L",
    T + "test_issue145_getnext": _OPT + "day_or=False, max_years_between_matches",
    T + "test_max_years_between_matches_validation": _OPT + "max_years_between_matches",
    T + "test_explicit_year_forward": _OPT + "day_or=False, max_years_between_matches",
    T + "test_issue_k34": _EXT + "L",
    T + "test_issue_k33": _EXT + "#",
    T + "test_bug_62_leap": _PREV,
    T + "test_get_prev_leap_year_feb29": _PREV,
    T + "test_expand_from_start_time_minute": _OPT + "expand_from_start_time",
    T + "test_expand_from_start_time_hour": _OPT + "expand_from_start_time",
    T + "test_expand_from_start_time_date": _OPT + "expand_from_start_time",
    T + "test_expand_from_start_time_month": _OPT + "expand_from_start_time",
    T + "test_expand_from_start_time_month_divisible": _OPT + "expand_from_start_time",
    T + "test_expand_from_start_time_day_of_week": _OPT + "expand_from_start_time",
    T + "test_expand_from_start_time_day_of_week_sunday": _OPT + "expand_from_start_time",
    T + "test_expand_from_start_time_uses_the_start_times_own_timezone": _OPT
    + "expand_from_start_time",
    T + "test_expand_from_start_time_naive_start_is_unaffected_by_timezone_handling": _OPT
    + "expand_from_start_time",
    T + "test_expand_from_start_time_timezone_invariants": _OPT + "expand_from_start_time",
    T + "test_expand_from_start_time_second": _OPT + "expand_from_start_time",
    T + "test_expand_from_start_time_year": _OPT + "expand_from_start_time",
    T + "test_expand_from_start_time_second_and_year_no_longer_raise": _OPT
    + "expand_from_start_time",
    T + "test_expand_from_start_time_seconds_and_years_invariants": _OPT + "expand_from_start_time",
    T + "test_expand_from_start_time_seconds_phase_matches_minutes": _OPT
    + "expand_from_start_time",
    T + "test_expand_from_start_time_with_hashed_divisor": _EXT + "H",
    T + "test_expand_from_start_time_never_leaves_the_declared_range": _OPT
    + "expand_from_start_time",
    T + "test_expand_from_start_time_never_adds_fires": _OPT + "expand_from_start_time",
    T + "test_expand_from_start_time_fuzz": _OPT + "expand_from_start_time",
    T + "test_get_next_fails_with_expand_from_start_time_true": _OPT + "expand_from_start_time",
    RANGE + "test_auto_ret_type": _API + "return types",
    RANGE + "test_input_type_exceptions": _API + "argument types",
    RANGE + "test_issue145_getnext": _OPT + "day_or=False, max_years_between_matches",
    RANGE + "test_issue145_range": _OPT + "day_or=False",
    RANGE + "test_croniter_range_derived_class": _API + "a croniter subclass",
    RANGE + "test_dt_types": _API + "a datetime subclass",
    RANGE + "test_year_range": _EXT + "year field",
    SPEED + "test_not_long_time": "timing: bench/schedules.py measures speed against croniter",
    **{
        RANDOM + name: _EXT + "R"
        for name in (
            "test_random",
            "test_random_range",
            "test_random_float",
            "test_random_with_year",
        )
    },
    **{
        HASH + name: _EXT + "H"
        for name in (
            "test_hash_hourly",
            "test_hash_daily",
            "test_hash_weekly",
            "test_hash_monthly",
            "test_hash_yearly",
            "test_hash_second",
            "test_hash_year",
            "test_hash_id_change",
            "test_hash_epoch_change",
            "test_hash_range",
            "test_hash_division",
            "test_hash_range_division",
            "test_hash_division_unchanged_when_divisor_fits",
            "test_hash_division_offset_at_field_max",
            "test_hash_range_division_offset_at_range_end",
            "test_hash_divisor_wider_than_range",
            "test_hash_divisor_wider_than_field",
            "test_hash_division_invariants",
            "test_hash_range_division_never_escapes_its_range",
            "test_hash_range_outside_field",
            "test_hash_invalid_range",
            "test_hash_id_bytes",
            "test_hash_float",
            "test_invalid_definition",
            "test_invalid_hash_id_type",
            "test_invalid_divisor",
            "test_hash_word_midnight",
            "test_hash_word_hourly",
            "test_hash_word_daily",
            "test_hash_word_weekly",
            "test_hash_word_monthly",
            "test_hash_word_yearly",
            "test_hash_word_annually",
            "test_expand_minutes",
            "test_expand_minutes_range_2_minutes",
            "test_expand_minutes_range_3_minutes",
            "test_expand_minutes_range_15_minutes",
            "test_expand_minutes_with_full_range",
            "test_expand_hours",
            "test_expand_hours_range_every_2_hours",
            "test_expand_hours_range_4_hours",
            "test_expand_hours_range_8_hours",
            "test_expand_hours_range_10_hours",
            "test_expand_hours_range_12_hours",
            "test_expand_hours_with_full_range",
            "test_expand_month_days",
            "test_expand_month_days_range_2_days",
            "test_expand_month_days_range_5_days",
            "test_expand_month_days_range_12_days",
            "test_expand_month_days_with_full_range",
            "test_expand_month_days_range_2_months",
            "test_expand_month_days_range_3_months",
            "test_expand_month_days_range_5_months",
            "test_expand_months_with_full_range",
            "test_expand_week_days",
            "test_expand_week_days_range_2_days",
            "test_expand_week_days_range_4_days",
            "test_expand_week_days_with_full_range",
            "test_expand_years_by_division",
            "test_expand_years_by_range",
            "test_expand_years_by_range_and_division",
        )
    },
}

#: Tests ported for their standard, forward assertions; what was left out.
PARTLY: dict[str, str] = {
    T + "test_dom_dow_vixie_cron_bug": "the implement_cron_bug=True half (option)",
    T + "test_error": "get_next(str) raising TypeError (API)",
    T + "test_optimize_cron_expressions": "two rows with sat#3 (extension #)",
    T + "test_step_from_field_max_optional_fields": "the year rows (extension)",
    T + "test_bug3": "the get_prev calls (backwards)",
    T + "test_bug57": "the get_prev calls (backwards)",
    T + "test_multiple_months": "the get_prev calls (backwards)",
    T + "test_timezone": "the tzinfo of the result (API: we return UTC)",
    T + "test_timezone_pytz": "the tzinfo of the result (API)",
    T + "test_timezone_dateutil": "the tzinfo of the result (API)",
    T + "test_timezone_winter_time": "the get_prev half (backwards)",
    T + "test_timezone_winter_time_pytz": "the get_prev half (backwards)",
    T + "test_timezone_summer_time": "the get_prev half (backwards)",
    T + "test_timezone_summer_time_pytz": "the get_prev half (backwards)",
    T + "test_std_dst": "get_current (API)",
    T + "test_std_dst_pytz": "get_current (API)",
    T + "test_std_dst3": "the get_prev call (backwards)",
    T + "test_std_dst3_pytz": "the get_prev call (backwards)",
    T + "test_is_valid": "the H row (extension)",
    T + "test_non_ascii_digits_rejected": "the rows with W, #, L and H (extension)",
    T + "test_is_valid_strict": "the L row (extension)",
    T + "test_exactly_the_same_minute": "the get_prev calls (backwards)",
    T + "test_milliseconds": "the get_prev calls (backwards)",
    T + "test_match": "the day_or=False rows (option)",
    T + "test_match_range": "the day_or=False rows (option)",
    T + "test_dst_issue90_st31ny": "the get_prev half (backwards)",
    T + "test_dst_issue90_st31ny_pytz": "the get_prev half (backwards)",
    T + "test_dst_gap_shift_is_not_a_fire_time": "get_prev and the reverse range (backwards)",
    T + "test_dst_gap_shift_is_not_a_fire_time_pytz": "get_prev (backwards)",
    T + "test_hash_mixup_all_fri_3rd_sat": "the rows with # (extension)",
    T + "test_lwom_mixup_all_fri_last_sat": "the rows with L (extension)",
    T + "test_issue156": "the row with sat#3 (extension)",
    T + "test_confirm_sort": "the rows with L and # (extension)",
    T + "test_issue280": "the 7-field row (extension: year field)",
    T + "test_issue_k11": "next() with start_time= (API)",
    T + "test_issue_k12": "set_current (API)",
    T + "test_expand_from_start_time_issue_252": "the expand_from_start_time rows (option)",
    T + "test_expand_from_start_time_respects_declared_bounds": "the expand_from_start_time "
    "rows (option)",
    T + "test_expand_from_start_time_respects_declared_bounds_in_seconds_and_years": "the "
    "expand_from_start_time rows and the year rows (option, extension)",
    T + "test_expand_from_start_time_does_not_change_a_range_into_another_kind": "the "
    "expand_from_start_time rows (option)",
    T + "test_expand_from_start_time_at_the_unix_epoch": "the expand_from_start_time rows (option)",
    T + "test_get_next_update_current": "get_current, update_current, all_next, get_prev (API)",
    T + "test_dow7_sunday_in_second_and_year_forms": "the 7-field row (extension: year field)",
    RANGE + "test_1day_step": "the reversed range (backwards)",
    RANGE + "test_1day_step_no_ends": "the reversed range (backwards)",
    RANGE + "test_1minute_step_float": "the float return type (API)",
    SPEED + "test_large_comma_list_expands_quickly": "the timing (bench/schedules.py)",
}

TESTS: tuple[str, ...] = (
    *(
        T + name
        for name in (
            "test_second_sec",
            "test_second",
            "test_second_repeat",
            "test_minute",
            "test_hour",
            "test_day",
            "test_day2",
            "test_weekday",
            "test_nth_weekday",
            "test_weekday_day_or_with_impossible_day_of_month",
            "test_weekday_day_or_with_impossible_day_of_month_prev",
            "test_impossible_day_of_month_alone_still_raises",
            "test_impossible_day_of_month_still_matches",
            "test_nth_weekday_with_restricted_day_of_month_still_raises",
            "test_nearest_weekday_with_restricted_day_of_week_still_raises",
            "test_both_union_sides_unsatisfiable_reports_direction",
            "test_weekday_day_and",
            "test_dom_dow_vixie_cron_bug",
            "test_month",
            "test_last_day_of_month",
            "test_last_day_of_month_with_leap_year",
            "test_last_day_of_month_with_leap_year_century_exception",
            "test_range_with_uppercase_last_day_of_month",
            "test_prev_last_day_of_month",
            "test_error",
            "test_sunday_to_thursday_with_alpha_conversion",
            "test_optimize_cron_expressions",
            "test_step_from_field_max",
            "test_step_from_field_max_does_not_leak_across_a_list",
            "test_step_from_field_max_optional_fields",
            "test_step_from_field_max_expand_from_start_time",
            "test_step_of_one_from_field_max",
            "test_block_dup_ranges",
            "test_prev_minute",
            "test_prev_day_of_month_with_crossing",
            "test_prev_weekday",
            "test_prev_nth_weekday",
            "test_prev_weekday2",
            "test_iso_weekday",
            "test_bug1",
            "test_bug2",
            "test_bug3",
            "test_bug34",
            "test_bug57",
            "test_multiple_months",
            "test_range_generator",
            "test_previous_hour",
            "test_previous_day",
            "test_previous_month",
            "test_previous_dow",
            "test_get_current",
            "test_first_of_march",
            "test_timezone",
            "test_timezone_pytz",
            "test_timezone_dateutil",
            "test_init_no_start_time",
            "test_timezone_winter_time",
            "test_timezone_winter_time_pytz",
            "test_timezone_summer_time",
            "test_timezone_summer_time_pytz",
            "test_std_dst",
            "test_std_dst_pytz",
            "test_std_dst2",
            "test_std_dst2_pytz",
            "test_std_dst3",
            "test_std_dst3_pytz",
            "test_dst_daily",
            "test_dst_hourly",
            "test_error_alpha_cron",
            "test_error_bad_cron",
            "test_is_valid",
            "test_non_ascii_digits_rejected",
            "test_non_ascii_whitespace_rejected",
            "test_is_valid_strict",
            "test_is_valid_strict_with_year",
            "test_is_valid_strict_year_parameter",
            "test_nearest_weekday_basic",
            "test_nearest_weekday_saturday",
            "test_nearest_weekday_sunday",
            "test_nearest_weekday_first_saturday",
            "test_nearest_weekday_last_day_sunday",
            "test_nearest_weekday_end_of_month_boundary",
            "test_nearest_weekday_wn_format",
            "test_nearest_weekday_get_prev",
            "test_nearest_weekday_is_valid",
            "test_nearest_weekday_iteration",
            "test_exactly_the_same_minute",
            "test_next_when_now_satisfies_cron",
            "test_milliseconds",
            "test_invalid_zerorepeat",
            "test_weekday_range",
            "test_issue_monsun_117",
            "test_mixdow",
            "test_match",
            "test_match_precision",
            "test_match_range_precision",
            "test_match_handle_bad_cron",
            "test_match_range",
            "test_dst_issue90_st31ny",
            "test_dst_issue90_st31ny_pytz",
            "test_dst_iter",
            "test_dst_iter_pytz",
            "test_dst_negative_dst_zone_ambiguous_pytz",
            "test_dst_gap_shift_is_not_a_fire_time",
            "test_dst_gap_shift_is_not_a_fire_time_pytz",
            "test_nth_wday_simple",
            "test_nth_as_last_wday_simple",
            "test_wdom_core_leap_year",
            "test_lwom_friday",
            "test_lwom_friday_2hours",
            "test_lwom_friday_2xh_2xm",
            "test_lwom_saturday_rev",
            "test_lwom_tue_thu",
            "test_hash_mixup_all_fri_3rd_sat",
            "test_lwom_mixup_all_fri_last_sat",
            "test_lwom_mixup_firstlast_sat",
            "test_lwom_mixup_4th_and_last",
            "test_configure_second_location",
            "test_nth_out_of_range",
            "test_nth_out_of_range_without_asserts",
            "test_last_out_of_range",
            "test_question_mark",
            "test_invalid_question_mark",
            "test_year",
            "test_year_with_other_field",
            "test_year_get_prev",
            "test_year_match",
            "test_year_bad_date_error",
            "test_year_with_second_at_beginning",
            "test_invalid_year",
            "test_issue_47",
            "test_issue_142_dow",
            "test_issue145_getnext",
            "test_max_years_between_matches_validation",
            "test_explicit_year_forward",
            "test_issue151",
            "test_overflow",
            "test_issue156",
            "test_confirm_sort",
            "test_issue_k6",
            "test_issue280",
            "test_issue_k11",
            "test_issue_k12",
            "test_issue_k34",
            "test_issue_k33",
            "test_bug_62_leap",
            "test_get_prev_leap_year_feb29",
            "test_expand_from_start_time_minute",
            "test_expand_from_start_time_hour",
            "test_expand_from_start_time_date",
            "test_expand_from_start_time_month",
            "test_expand_from_start_time_month_divisible",
            "test_expand_from_start_time_day_of_week",
            "test_expand_from_start_time_day_of_week_sunday",
            "test_expand_from_start_time_uses_the_start_times_own_timezone",
            "test_expand_from_start_time_naive_start_is_unaffected_by_timezone_handling",
            "test_expand_from_start_time_timezone_invariants",
            "test_expand_from_start_time_second",
            "test_expand_from_start_time_year",
            "test_expand_from_start_time_second_and_year_no_longer_raise",
            "test_expand_from_start_time_seconds_and_years_invariants",
            "test_expand_from_start_time_seconds_phase_matches_minutes",
            "test_expand_from_start_time_issue_252",
            "test_expand_from_start_time_respects_declared_bounds",
            "test_expand_from_start_time_respects_declared_bounds_in_seconds_and_years",
            "test_expand_from_start_time_does_not_change_a_range_into_another_kind",
            "test_expand_from_start_time_at_the_unix_epoch",
            "test_expand_from_start_time_with_hashed_divisor",
            "test_expand_from_start_time_never_leaves_the_declared_range",
            "test_expand_from_start_time_never_adds_fires",
            "test_expand_from_start_time_fuzz",
            "test_get_next_fails_with_expand_from_start_time_true",
            "test_get_next_update_current",
            "test_issue_2038y",
            "test_revert_issue_90_aka_support_dow7",
            "test_dow7_sunday_in_second_and_year_forms",
            "test_sunday_ranges_to",
            "test_sunday_ranges_from",
            "test_mth_ranges_from",
        )
    ),
    *(
        RANGE + name
        for name in (
            "test_1day_step",
            "test_1day_step_no_ends",
            "test_1month_step",
            "test_1minute_step_float",
            "test_auto_ret_type",
            "test_input_type_exceptions",
            "test_timezone_dst_pytz",
            "test_extra_hour_day_prio",
            "test_extra_hour_day_prio_pytz",
            "test_issue145_getnext",
            "test_issue145_range",
            "test_croniter_range_derived_class",
            "test_dt_types",
            "test_configure_second_location",
            "test_impossible_day_of_month_does_not_empty_the_range",
            "test_year_range",
        )
    ),
    DST + "test_issue_138_dt_to_ts_32b",
    DST + "test_issue_138_dt_to_ts_n",
    SPEED + "test_large_comma_list_expands_quickly",
    SPEED + "test_not_long_time",
    *(name for name in NOT_PORTED if name.startswith((RANDOM, HASH))),
)

_NEVER = Differs("never-fires", REJECTED)
_ATHENS = "Europe/Athens"
_WARSAW = "Europe/Warsaw"
_SAO_PAULO = "America/Sao_Paulo"
_LORD_HOWE = "Australia/Lord_Howe"
_ATHENS_WINTER = (
    "2013-10-27T02:30:00+03:00",
    "2013-10-27T03:00:00+03:00",
    "2013-10-27T03:30:00+03:00",
    "2013-10-27T03:00:00+02:00",
    "2013-10-27T03:30:00+02:00",
    "2013-10-27T04:00:00+02:00",
    "2013-10-27T04:30:00+02:00",
)
_ATHENS_SUMMER = (
    "2013-03-31T01:30:00+02:00",
    "2013-03-31T02:00:00+02:00",
    "2013-03-31T02:30:00+02:00",
    "2013-03-31T04:00:00+03:00",
    "2013-03-31T04:30:00+03:00",
)
_WARSAW_FALL = (
    "2017-10-29T02:00:00+02:00",
    "2017-10-29T02:00:00+01:00",
    "2017-10-29T03:00:00+01:00",
    "2017-10-29T04:00:00+01:00",
)
_SAO_PAULO_MIDNIGHT = (  # 2018-02-18 00:00 -03 falls back to 2018-02-17 23:00
    ("2018-02-17T21:00:00", "2018-02-18 00:00:00-03:00"),
    ("2018-02-17T22:00:00", "2018-02-18 00:00:00-03:00"),
    ("2018-02-17T23:00:00", "2018-02-18 00:00:00-03:00"),
    ("2018-02-18T00:00:00", "2018-02-19 00:00:00-03:00"),
    ("2018-02-17T21:05:00", "2018-02-18 00:00:00-03:00"),
    ("2018-02-17T22:05:00", "2018-02-18 00:00:00-03:00"),
    ("2018-02-17T23:05:00", "2018-02-18 00:00:00-03:00"),
    ("2018-02-18T00:05:00", "2018-02-19 00:00:00-03:00"),
)
_PARIS_GAP = ("2020-03-29T03:00:00+02:00", "2020-03-30T02:01:00+02:00", "2020-03-31T02:01:00+02:00")
_HEBRON = ("2022-03-26T00:00:00+02:00", "2022-03-27T01:00:00+03:00", "2022-03-28T00:00:00+03:00")
_FRIDAYS_MARCH_2021 = ("2021-03-05", "2021-03-12", "2021-03-19", "2021-03-26")


def _lord_howe(name: str) -> list[Row]:
    return [
        Next(
            f"{T}{name}[from 01:43]",
            "0 * * * *",
            "2019-10-06T01:43",
            ("2019-10-06T03:00:00+11:00",),
            tz=_LORD_HOWE,
        ),
        Next(
            f"{T}{name}[from 01:03]",
            "0 * * * *",
            "2019-10-06T01:03",
            ("2019-10-06T03:00:00+11:00",),
            tz=_LORD_HOWE,
        ),
        Match(f"{T}{name}", "0 * * * *", "2019-10-06T02:30", False, tz=_LORD_HOWE, precision=60),
        Match(f"{T}{name}", "0,30 * * * *", "2019-10-06T02:30", True, tz=_LORD_HOWE, precision=60),
    ]


ROWS: list[Row] = [
    # -- seconds (croniter's sixth field, our first) ----------------------------------------
    Next(
        T + "test_second_sec",
        "15,25 * * * * *",
        "2012-04-06T13:26:10",
        ("2012-04-06T13:26:15", "2012-04-06T13:26:25", "2012-04-06T13:27:15"),
        peer="* * * * * 15,25",
    ),
    Next(
        T + "test_second",
        "* */1 * * * *",
        "2012-04-06T13:26:10",
        ("2012-04-06T13:26:11",),
        peer="*/1 * * * * *",
    ),
    Next(
        T + "test_second_repeat",
        "*/15 * * * * *",
        "2012-04-06T13:26:36",
        ("2012-04-06T13:26:45", "2012-04-06T13:27:00", "2012-04-06T13:27:15"),
        peer="* * * * * */15",
    ),
    # -- minute, hour, day, weekday, month -----------------------------------------------------
    Next(
        T + "test_minute",
        "*/1 * * * *",
        "2010-01-23T12:18",
        ("2010-01-23T12:19", "2010-01-23T12:59", "2010-01-23T13:00"),
        nth=(1, 41, 42),
    ),
    Next(
        T + "test_minute",
        "*/5 * * * *",
        "2010-01-23T12:18",
        ("2010-01-23T12:20", "2010-01-23T12:55", "2010-01-23T13:00"),
        nth=(1, 8, 9),
    ),
    Next(
        T + "test_hour",
        "0 */3 * * *",
        "2010-01-24T12:02",
        ("2010-01-24T15:00", "2010-01-25T00:00"),
        nth=(1, 4),
    ),
    Next(
        T + "test_day",
        "0 0 */3 * *",
        "2010-02-24T12:09",
        ("2010-02-25", "2010-02-28", "2010-03-01"),
    ),
    Next(T + "test_day[leap 1996]", "0 0 * * *", "1996-02-27", ("1996-02-28", "1996-02-29")),
    Next(T + "test_day[leap 2000]", "0 0 * * *", "2000-02-27", ("2000-02-28", "2000-02-29")),
    Next(T + "test_weekday", "0 0 * * sat", "2010-02-25", ("2010-02-27", "2010-03-06")),
    Next(
        T + "test_weekday", "0 0 1 * wed", "2010-01-25", ("2010-01-27", "2010-02-01", "2010-02-03")
    ),
    # A day-of-month that does not exist in the month leaves the weekday half (cron's OR).
    Next(
        T + "test_weekday_day_or_with_impossible_day_of_month",
        "0 0 31 2 0",
        "2026-01-01",
        ("2026-02-01", "2026-02-08", "2026-02-15"),
    ),
    Next(
        T + "test_weekday_day_or_with_impossible_day_of_month",
        "0 0 30 2 0",
        "2026-01-01",
        ("2026-02-01", "2026-02-08", "2026-02-15"),
    ),
    Next(
        T + "test_weekday_day_or_with_impossible_day_of_month",
        "0 0 31 4 0",
        "2026-01-01",
        ("2026-04-05", "2026-04-12", "2026-04-19"),
    ),
    # croniter raises CroniterBadDateError on get_next; we refuse the text.
    Next(
        T + "test_impossible_day_of_month_alone_still_raises",
        "0 0 31 2 *",
        "2026-01-01",
        ("",),
        differs=_NEVER,
    ),
    Next(
        T + "test_impossible_day_of_month_alone_still_raises",
        "0 0 30 2 *",
        "2026-01-01",
        ("",),
        differs=_NEVER,
    ),
    Match(
        T + "test_impossible_day_of_month_still_matches",
        "0 0 31 2 0",
        "2026-02-01",
        True,
        precision=60,
    ),
    Match(
        T + "test_impossible_day_of_month_still_matches",
        "0 0 31 2 0",
        "2026-02-02",
        False,
        precision=60,
    ),
    # every odd-numbered day OR every Saturday (the default, day_or=True)
    Next(
        T + "test_dom_dow_vixie_cron_bug",
        "0 16 */2 * sat",
        "2023-05-02",
        ("2023-05-03T16:00", "2023-05-05T16:00", "2023-05-06T16:00", "2023-05-07T16:00"),
    ),
    Next(
        T + "test_month",
        "0 0 1 * *",
        "2010-01-25",
        ("2010-02-01", "2010-03-01", "2010-12-01", "2011-01-01"),
        nth=(1, 2, 11, 12),
    ),
    # -- errors --------------------------------------------------------------------------------
    Valid(T + "test_error", "* * * *", False),
    Valid(T + "test_error", "-90 * * * *", False),
    Valid(T + "test_error", "a * * * *", False),
    Valid(T + "test_error", "* * * janu-jun *", False),
    Valid(T + "test_error", "1-1_0 * * * *", False),
    Valid(T + "test_error", "0-10/error * * * *", False),
    Valid(T + "test_error", "0-10/ * * * *", False),
    Valid(T + "test_error", "0-1& * * * *", False),
    Valid(T + "test_error", "* * 5-100 * *", False),
    Next(
        T + "test_sunday_to_thursday_with_alpha_conversion",
        "30 22 * * sun-thu",
        "2010-08-25T15:56",
        ("2010-08-25T22:30",),
    ),
    # -- expansion ("*" is every value of the field) --------------------------------------------
    Fields(T + "test_optimize_cron_expressions", "0-59 0 1 1 0", {"minute": "*"}),
    Fields(T + "test_optimize_cron_expressions", "0 0-23 1 1 0", {"hour": "*"}),
    Fields(T + "test_optimize_cron_expressions", "0 0 1-31 1 0", {"day-of-week": (0,)}),
    Fields(T + "test_optimize_cron_expressions", "0 0 1-31 1 *", {"day-of-month": "*"}),
    Fields(T + "test_optimize_cron_expressions", "0 0 1 1-12 0", {"month": "*"}),
    Fields(
        T + "test_optimize_cron_expressions", "0 0 1 1 0-6", {"day-of-week": (0, 1, 2, 3, 4, 5, 6)}
    ),
    Fields(T + "test_optimize_cron_expressions", "0 0 * 1 0-6", {"day-of-week": "*"}),
    Fields(
        T + "test_optimize_cron_expressions",
        "0-59 0 0 1 1 0",
        {"second": "*"},
        peer="0 0 1 1 0 0-59",
    ),
    Fields(T + "test_optimize_cron_expressions", "30 1-12,0,10-23 15-21 * fri", {"hour": "*"}),
    Fields(T + "test_optimize_cron_expressions", "30 1-23,0 15-21 * fri", {"hour": "*"}),
    # "{start}/{step}" from the field's maximum is that value alone.
    Fields(T + "test_step_from_field_max", "59/15 * * * *", {"minute": (59,)}),
    Fields(T + "test_step_from_field_max", "* 23/6 * * *", {"hour": (23,)}),
    Fields(T + "test_step_from_field_max", "* * 31/5 * *", {"day-of-month": (31,)}),
    Fields(T + "test_step_from_field_max", "* * * DEC/3 *", {"month": (12,)}),
    Fields(T + "test_step_from_field_max", "* * * * SAT/2", {"day-of-week": (6,)}),
    Fields(T + "test_step_from_field_max", "45/15 * * * *", {"minute": (45,)}),
    Fields(T + "test_step_from_field_max", "58/15 * * * *", {"minute": (58,)}),
    Fields(T + "test_step_from_field_max", "44/15 * * * *", {"minute": (44, 59)}),
    Fields(T + "test_step_from_field_max", "5/15 * * * *", {"minute": (5, 20, 35, 50)}),
    Fields(T + "test_step_from_field_max", "*/15 * * * *", {"minute": (0, 15, 30, 45)}),
    # croniter reads an equal range as the whole field; cron reads it as the one value.
    Fields(
        T + "test_step_from_field_max",
        "5-5 * * * *",
        {"minute": "*"},
        differs=Differs("n-n", {"minute": (5,)}),
    ),
    Fields(
        T + "test_step_from_field_max",
        "59-59/15 * * * *",
        {"minute": (0, 15, 30, 45)},
        differs=Differs("n-n", {"minute": (59,)}),
    ),
    Fields(
        T + "test_step_from_field_max",
        "0 0 1 1-1 0",
        {"month": "*"},
        differs=Differs("n-n", {"month": (1,)}),
    ),
    Fields(
        T + "test_step_from_field_max",
        "0 0 * JAN-JAN *",
        {"month": "*"},
        differs=Differs("n-n", {"month": (1,)}),
    ),
    Fields(T + "test_step_from_field_max", "* * * * 7/2", {"day-of-week": (0, 2, 4, 6)}),
    Fields(
        T + "test_step_from_field_max_does_not_leak_across_a_list",
        "1-1,59/15,55-59/2 * * * *",
        {"minute": "*"},
        differs=Differs("n-n", {"minute": (1, 55, 57, 59)}),
    ),
    Fields(
        T + "test_step_from_field_max_does_not_leak_across_a_list",
        "* * * 1-1,12/6,11-12/1 *",
        {"month": "*"},
        differs=Differs("n-n", {"month": (1, 11, 12)}),
    ),
    Fields(
        T + "test_step_from_field_max_optional_fields",
        "59/15 * * * * *",
        {"second": (59,)},
        peer="* * * * * 59/15",
    ),
    Fields(T + "test_step_of_one_from_field_max", "* * * * 6/1", {"day-of-week": (6,)}),
    Fields(T + "test_step_of_one_from_field_max", "59/1 * * * *", {"minute": (59,)}),
    Fields(T + "test_step_of_one_from_field_max", "* * * * */1", {"day-of-week": "*"}),
    Fields(T + "test_block_dup_ranges", "* 5,5,1-6 * * *", {"hour": (1, 2, 3, 4, 5, 6)}),
    Fields(T + "test_block_dup_ranges", "* * * * 2-3,4-5,3,3,3", {"day-of-week": (2, 3, 4, 5)}),
    Fields(
        T + "test_block_dup_ranges",
        "1,5,*/20,20,15 * * * * *",
        {"second": (0, 1, 5, 15, 20, 40)},
        peer="* * * * * 1,5,*/20,20,15",
    ),
    Fields(T + "test_block_dup_ranges", "* 4,1-4,5,4 * * *", {"hour": (1, 2, 3, 4, 5)}),
    Fields(
        T + "test_block_dup_ranges",
        "59 23 * 1 wed,fri,mon-thu,tue,tue",
        {"day-of-week": (1, 2, 3, 4, 5)},
    ),
    # -- more next times --------------------------------------------------------------------------
    Next(T + "test_iso_weekday", "0 0 * * 6", "2010-02-25", ("2010-02-27", "2010-03-06")),
    Next(
        T + "test_bug2",
        "0 * * 3 *",
        "2012-01-01T00:00",
        ("2012-03-01T00:00", "2012-03-01T01:00", "2012-03-01T02:00"),
    ),
    Next(
        T + "test_bug3",
        "00 03 16,30 * *",
        "2013-03-01T12:17:34.257877",
        ("2013-03-16T03:00", "2013-03-30T03:00", "2013-04-16T03:00"),
    ),
    Next(T + "test_bug34", "* * 31 2 *", "2012-02-24", ("",), differs=_NEVER),
    Next(T + "test_bug57", "0 4/6 * * *", "2012-02-24", ("2012-02-24T04:00",)),
    Next(T + "test_bug57", "0 0/6 * * *", "2012-02-24", ("2012-02-24T06:00",)),
    Next(T + "test_multiple_months", "0 0 1 3,6,9,12 *", "2016-03-01", ("2016-06-01",)),
    Next(T + "test_multiple_months", "0 0 1 3,6,9,12 *", "2016-02-15", ("2016-03-01",)),
    Next(T + "test_multiple_months", "0 0 1 3,6,9,12 *", "2016-12-03T10:00", ("2017-03-01",)),
    Next(
        T + "test_range_generator",
        "1-9/2 0 1 * *",
        "2013-03-04",
        (
            "2013-04-01T00:01",
            "2013-04-01T00:03",
            "2013-04-01T00:05",
            "2013-04-01T00:07",
            "2013-04-01T00:09",
        ),
    ),
    Next(T + "test_first_of_march", "0 0 */10 * *", "2025-02-22", ("2025-03-01",)),
    # -- time zones and DST (zoneinfo, also for the pytz and dateutil variants) --------------
    Next(
        T + "test_timezone",
        "* * * * *",
        "2013-03-04T12:15",
        ("2013-03-04T12:16:00+09:00",),
        tz="Asia/Tokyo",
    ),
    Next(
        T + "test_timezone_pytz",
        "* * * * *",
        "2013-03-04T12:15",
        ("2013-03-04T12:16:00+09:00",),
        tz="Asia/Tokyo",
    ),
    Next(
        T + "test_timezone_dateutil",
        "* * * * *",
        "2013-03-04T12:15",
        ("2013-03-04T12:16:00+09:00",),
        tz="Asia/Tokyo",
    ),
    Next(
        T + "test_timezone_winter_time",
        "*/30 * * * *",
        "2013-10-27T02:00",
        _ATHENS_WINTER,
        tz=_ATHENS,
    ),
    Next(
        T + "test_timezone_winter_time_pytz",
        "*/30 * * * *",
        "2013-10-27T02:00",
        _ATHENS_WINTER,
        tz=_ATHENS,
    ),
    Next(
        T + "test_timezone_summer_time",
        "*/30 * * * *",
        "2013-03-31T01:00",
        _ATHENS_SUMMER,
        tz=_ATHENS,
    ),
    Next(
        T + "test_timezone_summer_time_pytz",
        "*/30 * * * *",
        "2013-03-31T01:00",
        _ATHENS_SUMMER,
        tz=_ATHENS,
    ),
    *(
        row
        for name in ("test_std_dst", "test_std_dst_pytz")
        for row in (
            Next(T + name, "0 0 * * *", "2017-03-26", ("2017-03-27T00:00:00+02:00",), tz=_WARSAW),
            Next(
                T + name,
                "0 * * * *",
                "2017-03-26T01:00",
                ("2017-03-26T03:00:00+02:00",),
                tz=_WARSAW,
            ),
            Next(T + name, "0 0 * * *", "2017-10-29", ("2017-10-30T00:00:00+01:00",), tz=_WARSAW),
            Next(T + name, "0 * * * *", "2017-10-29T01:59", _WARSAW_FALL, tz=_WARSAW),
        )
    ),
    *(
        Next(f"{T}{name}[{i}]", "0 0 * * *", start, (end,), tz=_SAO_PAULO)
        for name in ("test_std_dst2", "test_std_dst2_pytz")
        for i, (start, end) in enumerate(_SAO_PAULO_MIDNIGHT)
    ),
    Next(
        T + "test_std_dst3",
        "0 0 24 * *",
        "2020-04-15",
        ("2020-04-24T00:00:00+09:30",),
        tz="Australia/Adelaide",
    ),
    Next(
        T + "test_std_dst3_pytz",
        "0 0 24 * *",
        "2020-04-15",
        ("2020-04-24T00:00:00+09:30",),
        tz="Australia/Adelaide",
    ),
    Next(
        T + "test_dst_daily",
        "7 0 * * *",
        "2025-03-30",
        ("2025-03-30T00:07:00+00:00", "2025-03-31T00:07:00+01:00", "2025-04-01T00:07:00+01:00"),
        tz="Europe/London",
    ),
    Next(
        T + "test_dst_hourly",
        "7 * * * *",
        "2025-03-30",
        ("2025-03-30T00:07:00+00:00", "2025-03-30T02:07:00+01:00", "2025-03-30T03:07:00+01:00"),
        tz="Europe/London",
    ),
    # -- validity --------------------------------------------------------------------------------
    Valid(T + "test_error_alpha_cron", "* * * janu-jun *", False),
    Valid(T + "test_error_bad_cron", "* * * *", False),
    Valid(T + "test_error_bad_cron", "* * * * * * * *", False),
    Valid(T + "test_is_valid", "0 * * * *", True),
    Valid(T + "test_is_valid", "0 * *", False),
    Valid(T + "test_is_valid", "* * * janu-jun *", False),
    *(
        Valid(T + "test_non_ascii_digits_rejected", spec, False)
        for spec in (
            "\u0665 * * * *",
            "\uff10 \uff10 * * *",
            "\U0001d7d3 * * * *",
            "*/\u0661\u0665 * * * *",
            "1-\u0661\u0660 * * * *",
        )
    ),
    *(
        Valid(T + "test_non_ascii_whitespace_rejected", spec, False)
        for spec in (
            "0\u00a00 * * *",
            "0\u30000 * * *",
            "0\u20030 * * *",
            "0\u00850 * * *",
            "0 0 * * *\u00a0",
        )
    ),
    Valid(T + "test_non_ascii_whitespace_rejected", " 0\t0  *\n* *\n", True),
    # croniter.is_valid without strict=True accepts a spec that can never fire.
    Valid(T + "test_is_valid_strict", "0 0 31 2 *", True, differs=Differs("never-fires", False)),
    # strict=True: what we always do
    *(
        Valid(T + "test_is_valid_strict[strict]", spec, valid)
        for spec, valid in (
            ("0 0 31 2 *", False),
            ("0 0 30 2 *", False),
            ("0 0 31 4 *", False),
            ("0 0 31 6 *", False),
            ("0 0 29 2 *", True),
            ("0 0 31 1 *", True),
            ("0 0 31 1,2 *", True),
            ("0 0 30 2,4 *", True),
            ("0 0 31 * *", True),
            ("0 0 * 2 *", True),
            ("0 * * * *", True),
            ("*/5 * * * *", True),
        )
    ),
    Next(
        T + "test_exactly_the_same_minute",
        "30 7,12,17 * * *",
        "2018-03-05T07:30",
        ("2018-03-05T12:30",),
    ),
    Next(
        T + "test_next_when_now_satisfies_cron",
        "4 * * * *",
        "2018-05-21T00:03",
        ("2018-05-21T00:04",),
    ),
    Next(
        T + "test_next_when_now_satisfies_cron",
        "4 * * * *",
        "2018-05-21T00:04:20",
        ("2018-05-21T01:04",),
    ),
    Next(
        T + "test_milliseconds", "0 10 * * *", "2018-01-02T10:00:00.000500", ("2018-01-03T10:00",)
    ),
    Next(T + "test_milliseconds", "0 10 * * *", "2018-01-02T10:00:01", ("2018-01-03T10:00",)),
    Next(
        T + "test_milliseconds", "0 10 * * *", "2018-01-02T09:59:59.999999", ("2018-01-02T10:00",)
    ),
    *(
        Valid(T + "test_invalid_zerorepeat", spec, False)
        for spec in (
            "*/0 * * * *",
            "5-5/0 * * * *",
            "59-0/0 * * * *",
            "* * 31-1/0 * *",
            "* * * * 6-0/0",
        )
    ),
    # croniter restarts from each result plus a day (6 fields: seconds first for us).
    *_hops(
        T + "test_weekday_range",
        "* 0 0 * * 2-4",
        "0 0 * * 2-4 *",
        (
            ("2019-01-14T00:00:00", "2019-01-15T00:00:00"),
            ("2019-01-16T00:00:00", "2019-01-16T00:00:01"),
            ("2019-01-17T00:00:01", "2019-01-17T00:00:02"),
            ("2019-01-18T00:00:02", "2019-01-22T00:00:00"),
            ("2019-01-23T00:00:00", "2019-01-23T00:00:01"),
            ("2019-01-24T00:00:01", "2019-01-24T00:00:02"),
            ("2019-01-25T00:00:02", "2019-01-29T00:00:00"),
            ("2019-01-30T00:00:00", "2019-01-30T00:00:01"),
            ("2019-01-31T00:00:01", "2019-01-31T00:00:02"),
            ("2019-02-01T00:00:02", "2019-02-05T00:00:00"),
        ),
    ),
    *_hops(
        T + "test_weekday_range",
        "* 0 0 * * 0-6",
        "0 0 * * 0-6 *",
        tuple(
            (f"2019-01-{14 + i}T00:00:{i:02d}", f"2019-01-{14 + i}T00:00:{i + 1:02d}")
            for i in range(10)
        ),
    ),
    *_hops(
        T + "test_issue_monsun_117",
        "* 0 0 * * Wed-Sun",
        "0 0 * * Wed-Sun *",
        (
            ("2019-01-14T00:00:00", "2019-01-16T00:00:00"),
            ("2019-01-17T00:00:00", "2019-01-17T00:00:01"),
            ("2019-01-18T00:00:01", "2019-01-18T00:00:02"),
            ("2019-01-19T00:00:02", "2019-01-19T00:00:03"),
            ("2019-01-20T00:00:03", "2019-01-20T00:00:04"),
            ("2019-01-21T00:00:04", "2019-01-23T00:00:00"),
            ("2019-01-24T00:00:00", "2019-01-24T00:00:01"),
            ("2019-01-25T00:00:01", "2019-01-25T00:00:02"),
            ("2019-01-26T00:00:02", "2019-01-26T00:00:03"),
            ("2019-01-27T00:00:03", "2019-01-27T00:00:04"),
            ("2019-01-28T00:00:04", "2019-01-30T00:00:00"),
            ("2019-01-31T00:00:00", "2019-01-31T00:00:01"),
        ),
    ),
    # -- match and match_range (precision 60 s for 5 fields, 1 s for 6) ------------------------
    Match(T + "test_match", "0 0 * * *", "2019-01-14T00:00", True, precision=60),
    Match(T + "test_match", "0 0 * * *", "2019-01-14T00:01", False, precision=60),
    Match(T + "test_match", "1 0 0 * * *", "2023-05-25T00:00:01", True, peer="0 0 * * * 1"),
    Match(T + "test_match", "1 0 0 * * *", "2023-05-25T00:00:02", False, peer="0 0 * * * 1"),
    Match(T + "test_match", "31 * * * *", "2019-01-14T01:31", True, precision=60),
    Match(T + "test_match", "0 0 10 * wed", "2020-06-10", True, precision=60),
    Match(T + "test_match", "0 0 10 * fri", "2020-06-10", True, precision=60),
    Match(T + "test_match", "0 0 10 * fri", "2020-06-12", True, precision=60),
    Match(T + "test_match_precision", "0 0 * * *", "2019-01-14T00:00:59", True, precision=60),
    Match(T + "test_match_precision", "0 0 * * *", "2019-01-14T00:01:01", False, precision=60),
    Match(T + "test_match_precision", "0 0 * * *", "2019-01-14T00:00:00", True),
    Match(T + "test_match_precision", "0 0 * * *", "2019-01-14T00:00:59", False),
    Match(
        T + "test_match_precision", "0 0 0 * * *", "2019-01-14T00:00:00", True, peer="0 0 * * * 0"
    ),
    Match(
        T + "test_match_precision", "0 0 0 * * *", "2019-01-14T00:00:01", False, peer="0 0 * * * 0"
    ),
    Match(
        T + "test_match_precision",
        "0 0 0 * * *",
        "2019-01-14T00:00:59",
        True,
        precision=60,
        peer="0 0 * * * 0",
    ),
    Match(
        T + "test_match_range_precision",
        "0 0 * * *",
        "2019-01-14T00:00:30",
        False,
        until="2019-01-14T00:00:40",
    ),
    Match(
        T + "test_match_range_precision",
        "0 0 * * *",
        "2019-01-14T00:00:30",
        True,
        precision=60,
        until="2019-01-14T00:00:40",
    ),
    Match(
        T + "test_match_range",
        "0 0 * * *",
        "2019-01-13T00:59",
        True,
        precision=60,
        until="2019-01-14T00:01",
    ),
    Match(
        T + "test_match_range",
        "0 0 * * *",
        "2019-01-13T00:01",
        False,
        precision=60,
        until="2019-01-13T00:59",
    ),
    Match(
        T + "test_match_range",
        "1 0 0 * * *",
        "2023-05-25T00:00:00",
        True,
        until="2023-05-25T00:00:02",
        peer="0 0 * * * 1",
    ),
    Match(
        T + "test_match_range",
        "1 0 0 * * *",
        "2023-05-25T00:00:02",
        False,
        until="2023-05-25T00:00:04",
        peer="0 0 * * * 1",
    ),
    Match(
        T + "test_match_range",
        "1 0 0 * * *",
        "2023-05-25T00:00:01",
        True,
        until="2023-05-25T00:00:04",
        peer="0 0 * * * 1",
    ),
    Match(
        T + "test_match_range",
        "31 * * * *",
        "2019-01-14T01:30",
        True,
        precision=60,
        until="2019-01-14T01:31",
    ),
    Match(
        T + "test_match_range", "0 0 10 * wed", "2020-06-09", True, precision=60, until="2020-06-11"
    ),
    Match(
        T + "test_match_range", "0 0 10 * fri", "2020-06-10", True, precision=60, until="2020-06-11"
    ),
    Match(
        T + "test_match_range", "0 0 10 * fri", "2020-06-11", True, precision=60, until="2020-06-12"
    ),
    # -- DST ------------------------------------------------------------------------------------
    Next(
        T + "test_dst_issue90_st31ny",
        "1 2 * * *",
        "2020-03-29T01:59:55",
        _PARIS_GAP,
        tz="Europe/Paris",
    ),
    Next(
        T + "test_dst_issue90_st31ny_pytz",
        "1 2 * * *",
        "2020-03-29T01:59:55",
        _PARIS_GAP,
        tz="Europe/Paris",
    ),
    Next(T + "test_dst_iter", "0 0 * * *", "2022-03-25", _HEBRON, tz="Asia/Hebron"),
    Next(T + "test_dst_iter_pytz", "0 0 * * *", "2022-03-25", _HEBRON, tz="Asia/Hebron"),
    Next(
        T + "test_dst_negative_dst_zone_ambiguous_pytz",
        "0 1 * * *",
        "2019-10-26T12:00",
        ("2019-10-27T01:00:00+01:00", "2019-10-27T01:00:00+00:00", "2019-10-28T01:00:00+00:00"),
        tz="Europe/Dublin",
        differs=Differs(
            "dst-repeat",
            ("2019-10-27T01:00:00+01:00", "2019-10-28T01:00:00+00:00", "2019-10-29T01:00:00+00:00"),
        ),
    ),
    *_lord_howe("test_dst_gap_shift_is_not_a_fire_time"),
    Range(
        T + "test_dst_gap_shift_is_not_a_fire_time",
        "0 * * * *",
        "2019-10-06T00:00",
        "2019-10-06T05:00",
        (
            "2019-10-06T00:00:00+10:30",
            "2019-10-06T01:00:00+10:30",
            "2019-10-06T03:00:00+11:00",
            "2019-10-06T04:00:00+11:00",
            "2019-10-06T05:00:00+11:00",
        ),
        tz=_LORD_HOWE,
    ),
    *_lord_howe("test_dst_gap_shift_is_not_a_fire_time_pytz"),
    # -- plain day-of-week parts of the L and # tests ------------------------------------------
    Next(T + "test_hash_mixup_all_fri_3rd_sat", "0 0 * * 5", "2021-03-01", _FRIDAYS_MARCH_2021),
    Next(T + "test_lwom_mixup_all_fri_last_sat", "0 0 * * 5", "2021-03-01", _FRIDAYS_MARCH_2021),
    Next(
        T + "test_configure_second_location",
        "59 58 1 * * *",
        "2010-08-25",
        ("2010-08-25T01:58:59",),
    ),
    Next(T + "test_question_mark", "0 0 1 * ?", "2010-08-25T15:56", ("2010-09-01",)),
    Valid(T + "test_invalid_question_mark", "? * * * *", False),
    Valid(T + "test_invalid_question_mark", "* ? * * *", False),
    Valid(T + "test_invalid_question_mark", "* * ?,* * *", False),
    Match(T + "test_issue151", "* * * * *", "2019-01-14T11:00:59.999999", True, precision=60),
    Valid(T + "test_overflow", "0-10000000 * * * *", False),
    # * in a list is every value: the next minute, not the next Sunday.
    Next(
        T + "test_issue156", "* * * * *,0", "2019-01-14T11:00:59.999999", ("2019-01-14T11:01:00",)
    ),
    Valid(T + "test_issue156", "* * * * *,b", False),
    Fields(T + "test_confirm_sort", "0 8,22,10,23 1 1 0", {"hour": (8, 10, 22, 23)}),
    Valid(T + "test_issue_k6", "0 0 0 0 0", False),
    Valid(T + "test_issue_k6", "0 0 0 1 0", False),
    Valid(T + "test_issue280", "* 0 0 0 * *", False, peer="0 0 0 * * *"),
    Valid(T + "test_issue280[second_at_beginning]", "0 0 0 0 * *", False),
    Next(
        T + "test_issue_k11",
        "* * * * * ",
        "2019-01-14T11:00:59",
        ("2019-01-14T11:01:00-05:00",),
        tz="America/New_York",
    ),
    Next(
        T + "test_issue_k12",
        "* * * * *",
        "2010-01-23T12:18",
        ("2010-01-23T12:19:00+02:00",),
        tz=_ATHENS,
    ),
    # -- the default expansions stated in the expand_from_start_time tests ---------------------
    Fields(
        T + "test_expand_from_start_time_issue_252", "10-50/15 * * * *", {"minute": (10, 25, 40)}
    ),
    Fields(
        T + "test_expand_from_start_time_issue_252",
        "20-40/5 * * * *",
        {"minute": (20, 25, 30, 35, 40)},
    ),
    Fields(T + "test_expand_from_start_time_issue_252", "0-1/2 * * * *", {"minute": (0,)}),
    Fields(
        T + "test_expand_from_start_time_respects_declared_bounds",
        "10-20/7 * * * *",
        {"minute": (10, 17)},
    ),
    Fields(
        T + "test_expand_from_start_time_respects_declared_bounds_in_seconds_and_years",
        "10-50/15 * * * * *",
        {"second": (10, 25, 40)},
        peer="* * * * * 10-50/15",
    ),
    Fields(
        T + "test_expand_from_start_time_does_not_change_a_range_into_another_kind",
        "59-59/15 * * * *",
        {"minute": (0, 15, 30, 45)},
        differs=Differs("n-n", {"minute": (59,)}),
    ),
    Fields(
        T + "test_expand_from_start_time_does_not_change_a_range_into_another_kind",
        "0 0 1 1-1/3 *",
        {"month": (1, 4, 7, 10)},
        differs=Differs("n-n", {"month": (1,)}),
    ),
    Fields(
        T + "test_expand_from_start_time_at_the_unix_epoch",
        "0 0 * * 2-6/3",
        {"day-of-week": (2, 5)},
    ),
    Next(
        T + "test_get_next_update_current",
        "* * * * * *",
        "2024-07-12",
        ("2024-07-12T00:00:01", "2024-07-12T00:00:02", "2024-07-12T00:00:03"),
    ),
    Next(T + "test_issue_2038y", "* * * * *", "2040-01-01", ("2040-01-01T00:01",)),
    Valid(T + "test_revert_issue_90_aka_support_dow7", "* * * * 1-7", True),
    Valid(T + "test_revert_issue_90_aka_support_dow7", "* * * * 7", True),
    Fields(
        T + "test_dow7_sunday_in_second_and_year_forms",
        "0 0 0 * * 7",
        {"day-of-week": (0,)},
        peer="0 0 * * 7 0",
    ),
    Fields(
        T + "test_dow7_sunday_in_second_and_year_forms",
        "0 0 0 * * 0",
        {"day-of-week": (0,)},
        peer="0 0 * * 0 0",
    ),
    # -- Sunday as Sun, 7 and 0 in day-of-week ranges: 30 runs from 2024-01-01 -----------------
    *_sunday_forms(
        "test_sunday_ranges_to",
        "0 0 * * Sun-Sun",
        _ALL_DAYS_FROM_2_JAN,
        differs=Differs("n-n", _weekly("2024-01-07", 30)),
    ),
    *_sunday_forms("test_sunday_ranges_to", "0 0 * * Mon-Sun", _ALL_DAYS_FROM_2_JAN),
    *_sunday_forms(
        "test_sunday_ranges_to",
        "0 0 * * Tue-Sun",
        _days("2 3 4 5 6 7 9 10 11 12 13 14 16 17 18 19 20 21 23 24 25 26 27 28 30 31 1 2 3 4"),
    ),
    *_sunday_forms(
        "test_sunday_ranges_to",
        "0 0 * * Wed-Sun",
        _days("3 4 5 6 7 10 11 12 13 14 17 18 19 20 21 24 25 26 27 28 31 1 2 3 4 7 8 9 10 11"),
    ),
    *_sunday_forms(
        "test_sunday_ranges_to",
        "0 0 * * Thu-Sun",
        _days("4 5 6 7 11 12 13 14 18 19 20 21 25 26 27 28 1 2 3 4 8 9 10 11 15 16 17 18 22 23"),
    ),
    *_sunday_forms(
        "test_sunday_ranges_to",
        "0 0 * * Fri-Sun",
        _days("5 6 7 12 13 14 19 20 21 26 27 28 2 3 4 9 10 11 16 17 18 23 24 25 1 2 3 8 9 10"),
    ),
    *_sunday_forms(
        "test_sunday_ranges_to",
        "0 0 * * Sat-Sun",
        _days("6 7 13 14 20 21 27 28 3 4 10 11 17 18 24 25 2 3 9 10 16 17 23 24 30 31 6 7 13 14"),
    ),
    *_sunday_forms(
        "test_sunday_ranges_from",
        "0 0 * * Sun-Mon",
        _days("7 8 14 15 21 22 28 29 4 5 11 12 18 19 25 26 3 4 10 11 17 18 24 25 31 1 7 8 14 15"),
    ),
    *_sunday_forms(
        "test_sunday_ranges_from",
        "0 0 * * Sun-Tue",
        _days("2 7 8 9 14 15 16 21 22 23 28 29 30 4 5 6 11 12 13 18 19 20 25 26 27 3 4 5 10 11"),
    ),
    *_sunday_forms(
        "test_sunday_ranges_from",
        "0 0 * * Sun-Wed",
        _days("2 3 7 8 9 10 14 15 16 17 21 22 23 24 28 29 30 31 4 5 6 7 11 12 13 14 18 19 20 21"),
    ),
    *_sunday_forms(
        "test_sunday_ranges_from",
        "0 0 * * Sun-Thu",
        _days("2 3 4 7 8 9 10 11 14 15 16 17 18 21 22 23 24 25 28 29 30 31 1 4 5 6 7 8 11 12"),
    ),
    *_sunday_forms(
        "test_sunday_ranges_from",
        "0 0 * * Sun-Fri",
        _days("2 3 4 5 7 8 9 10 11 12 14 15 16 17 18 19 21 22 23 24 25 26 28 29 30 31 1 2 4 5"),
    ),
    *_sunday_forms("test_sunday_ranges_from", "0 0 * * Sun-Sat", _ALL_DAYS_FROM_2_JAN),
    *_sunday_forms(
        "test_sunday_ranges_from",
        "0 0 * * Thu-Tue/2",
        _days("2 4 6 9 11 13 16 18 20 23 25 27 30 1 3 6 8 10 13 15 17 20 22 24 27 29 2 5 7 9"),
        differs=Differs("wrap-step", _THU_SAT_MON),
    ),
    *_sunday_forms(
        "test_sunday_ranges_from",
        "0 0 * * Thu-Tue/3",
        _days("4 7 11 14 18 21 25 28 1 4 8 11 15 18 22 25 29 3 7 10 14 17 21 24 28 31 4 7 11 14"),
    ),
    # -- month ranges, wrapping and stepped: 16 runs from 2024-01-01 ------------------------
    Next(
        T + "test_mth_ranges_from",
        "0 0 1 Jan-Dec *",
        "2024-01-01",
        _months(
            "24 2, 24 3, 24 4, 24 5, 24 6, 24 7, 24 8, 24 9, "
            "24 10, 24 11, 24 12, 25 1, 25 2, 25 3, 25 4, 25 5"
        ),
    ),
    Next(
        T + "test_mth_ranges_from",
        "0 0 1 Nov-Mar *",
        "2024-01-01",
        _months(
            "24 2, 24 3, 24 11, 24 12, 25 1, 25 2, 25 3, 25 11, "
            "25 12, 26 1, 26 2, 26 3, 26 11, 26 12, 27 1, 27 2"
        ),
    ),
    Next(
        T + "test_mth_ranges_from",
        "0 0 1 Apr-Feb *",
        "2024-01-01",
        _months(
            "24 2, 24 4, 24 5, 24 6, 24 7, 24 8, 24 9, 24 10, "
            "24 11, 24 12, 25 1, 25 2, 25 4, 25 5, 25 6, 25 7"
        ),
    ),
    Next(
        T + "test_mth_ranges_from",
        "0 0 1 Apr-Mar/3 *",
        "2024-01-01",
        _months(
            "24 4, 24 7, 24 10, 25 1, 25 4, 25 7, 25 10, 26 1, "
            "26 4, 26 7, 26 10, 27 1, 27 4, 27 7, 27 10, 28 1"
        ),
    ),
    Next(
        T + "test_mth_ranges_from",
        "0 0 1 Apr-Mar/2 *",
        "2024-01-01",
        _months(
            "24 3, 24 4, 24 6, 24 8, 24 10, 24 12, 25 3, 25 4, "
            "25 6, 25 8, 25 10, 25 12, 26 3, 26 4, 26 6, 26 8"
        ),
        differs=Differs(
            "wrap-step",
            _months(
                "24 2, 24 4, 24 6, 24 8, 24 10, 24 12, 25 2, 25 4, "
                "25 6, 25 8, 25 10, 25 12, 26 2, 26 4, 26 6, 26 8"
            ),
        ),
    ),
    Next(
        T + "test_mth_ranges_from",
        "0 0 1 Jan-Aug/2 *",
        "2024-01-01",
        _months(
            "24 3, 24 5, 24 7, 25 1, 25 3, 25 5, 25 7, 26 1, "
            "26 3, 26 5, 26 7, 27 1, 27 3, 27 5, 27 7, 28 1"
        ),
    ),
    Next(
        T + "test_mth_ranges_from",
        "0 0 1 Jan-Aug/4 *",
        "2024-01-01",
        _months(
            "24 5, 25 1, 25 5, 26 1, 26 5, 27 1, 27 5, 28 1, "
            "28 5, 29 1, 29 5, 30 1, 30 5, 31 1, 31 5, 32 1"
        ),
    ),
    # -- test_croniter_range.py ---------------------------------------------------------------
    Range(
        RANGE + "test_1day_step",
        "0 0 * * *",
        "2016-12-02",
        "2016-12-10",
        _days("2 3 4 5 6 7 8 9 10", start="2016-12"),
    ),
    Range(
        RANGE + "test_1day_step_no_ends",
        "0 0 * * *",
        "2016-12-02",
        "2016-12-10",
        _days("3 4 5 6 7 8 9", start="2016-12"),
        exclusive=True,
    ),
    Range(
        RANGE + "test_1month_step",
        "0 0 1 * *",
        "1982-01-01",
        "1983-12-31",
        tuple(f"{y}-{m:02d}-01" for y in (1982, 1983) for m in range(1, 13)),
    ),
    Range(
        RANGE + "test_1minute_step_float",
        "* * * * *",
        "2000-01-01T00:00",
        "2000-01-01T00:01",
        ("2000-01-01T00:00", "2000-01-01T00:01"),
    ),
    Range(
        RANGE + "test_timezone_dst_pytz",
        "0 0 * * *",
        "2020-10-30",
        "2020-11-10",
        (
            "2020-10-30T00:00:00-04:00",
            "2020-10-31T00:00:00-04:00",
            "2020-11-01T00:00:00-04:00",
            *(f"2020-11-{d:02d}T00:00:00-05:00" for d in range(2, 11)),
        ),
        tz="America/New_York",
    ),
    *(
        Range(
            RANGE + name,
            "0 3 * * *",
            "2020-03-07",
            "2020-03-11",
            (
                "2020-03-07T03:00:00-05:00",
                "2020-03-08T03:00:00-04:00",
                "2020-03-09T03:00:00-04:00",
                "2020-03-10T03:00:00-04:00",
            ),
            tz="America/New_York",
        )
        for name in ("test_extra_hour_day_prio", "test_extra_hour_day_prio_pytz")
    ),
    Range(
        RANGE + "test_configure_second_location",
        "*/20 * * * * *",
        "2016-12-02T00:00",
        "2016-12-02T00:01",
        (
            "2016-12-02T00:00:00",
            "2016-12-02T00:00:20",
            "2016-12-02T00:00:40",
            "2016-12-02T00:01:00",
        ),
    ),
    Range(
        RANGE + "test_impossible_day_of_month_does_not_empty_the_range",
        "0 0 31 2 0",
        "2026-02-01",
        "2026-03-01",
        ("2026-02-01", "2026-02-08", "2026-02-15", "2026-02-22"),
    ),
    # -- test_croniter_dst_repetition.py (the process's TZ does not matter to us) -----------------
    Next(
        DST + "test_issue_138_dt_to_ts_32b",
        "*/5 * * * *",
        "2024-01-25T04:46",
        ("2024-01-25T04:50", "2024-01-25T04:55", "2024-01-25T05:00"),
    ),
    Next(
        DST + "test_issue_138_dt_to_ts_n",
        "*/5 * * * *",
        "2024-01-25T04:46",
        ("2024-01-25T04:50", "2024-01-25T04:55", "2024-01-25T05:00"),
    ),
    # -- test_croniter_speed.py: a 120,000-character list ---------------------------------------
    Fields(
        SPEED + "test_large_comma_list_expands_quickly",
        ",".join(["0-30"] * 20000) + " * * * *",
        {"minute": tuple(range(31))},
        differs=Differs("too-long", REJECTED),
    ),
]
