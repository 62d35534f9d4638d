"""The one backoff formula (:mod:`django_htask.engine.backoff`)."""

from __future__ import annotations

import math

import pytest

from django_htask.engine.backoff import Backoff, RetryPolicy


def test_the_delay_doubles_from_the_backoff_up_to_the_cap() -> None:
    policy = RetryPolicy(0.5, 30)
    assert [policy.delay(n) for n in range(1, 9)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
    assert policy.delay(10**9) == 30  # no overflow however many attempts


def test_no_cap_is_infinity_and_stays_finite_per_delay() -> None:
    policy = RetryPolicy(1, math.inf)
    assert policy.delay(11) == 1024
    assert policy.delay(10**9) == 2.0**1023


@pytest.mark.parametrize(
    ("backoff", "max_delay", "error"),
    [
        (-1, 10, ValueError),
        (math.inf, 10, ValueError),
        (math.nan, 10, ValueError),
        (1, -1, ValueError),
        (1, math.nan, ValueError),
        ("1", 10, TypeError),
        (True, 10, TypeError),
    ],
)
def test_bad_values_are_refused_naming_them(
    backoff: object, max_delay: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match=r"backoff|max_delay"):
        RetryPolicy(backoff, max_delay)  # type: ignore[arg-type]


def test_attempts_count_from_one() -> None:
    with pytest.raises(ValueError, match="attempt must be >= 1, got 0"):
        RetryPolicy(1, 2).delay(0)


def test_a_backoff_grows_with_failures_and_starts_over_after_a_success() -> None:
    backoff = Backoff(RetryPolicy(0.5, 2))
    assert backoff.delay == 0
    assert not backoff.succeeded()
    assert [backoff.failed() for _ in range(4)] == [0.5, 1, 2, 2]
    assert backoff.delay == 2
    assert backoff.succeeded()
    assert backoff.delay == 0
    assert backoff.failed() == 0.5
