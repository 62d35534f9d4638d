"""The one backoff formula (:mod:`django_htask.engine.backoff`)."""

from __future__ import annotations

import math

import pytest

from django_htask.engine.backoff import Backoff, RetryPolicy, error_names


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


# -- the retry policy of tasks and schedules: kinds, jitter, error filters ------------


class Steps:
    """An injected random source: the values given, in turn."""

    def __init__(self, *values: float) -> None:
        self.values = list(values)

    def __call__(self) -> float:
        return self.values.pop(0)


@pytest.mark.parametrize(
    ("kind", "delays"),
    [
        ("fixed", [3, 3, 3, 3, 3]),
        ("linear", [3, 6, 9, 10, 10]),
        ("exponential", [3, 6, 10, 10, 10]),
    ],
)
def test_each_kind_grows_as_documented_up_to_the_cap(kind: str, delays: list[float]) -> None:
    policy = RetryPolicy(3, 10, kind=kind)
    assert [policy.delay(n) for n in range(1, 6)] == delays


def test_the_default_kind_is_todays_exponential_formula() -> None:
    assert RetryPolicy(10, 60) == RetryPolicy(10, 60, kind="exponential", jitter="none")
    assert RetryPolicy().delay(2) == 20  # backoff 10 s, no cap


def test_full_jitter_is_uniform_from_zero_to_the_capped_delay() -> None:
    policy = RetryPolicy(4, 10, jitter="full", rng=Steps(0.0, 0.5, 0.999))
    assert [policy.delay(1), policy.delay(2), policy.delay(3)] == [0.0, 4.0, 10 * 0.999]


def test_equal_jitter_keeps_half_the_delay() -> None:
    policy = RetryPolicy(4, 10, jitter="equal", rng=Steps(0.0, 0.5, 0.999))
    assert [policy.delay(1), policy.delay(2), policy.delay(3)] == [2.0, 6.0, 5 + 5 * 0.999]


def test_jitter_with_a_seeded_source_is_deterministic_and_within_bounds() -> None:
    import random

    def delays(seed: int) -> list[float]:
        policy = RetryPolicy(1, 30, jitter="full", rng=random.Random(seed).random)
        return [policy.delay(n) for n in range(1, 50)]

    assert delays(7) == delays(7)
    assert delays(7) != delays(8)
    plain = RetryPolicy(1, 30)
    assert all(0 <= d <= plain.delay(n) for n, d in enumerate(delays(7), start=1))


def test_the_random_source_is_not_part_of_the_policys_equality() -> None:
    assert RetryPolicy(1, jitter="full", rng=Steps()) == RetryPolicy(1, jitter="full")


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        (
            {"kind": "quadratic"},
            ValueError,
            "kind must be one of fixed, linear, exponential, got 'quadratic'",
        ),
        ({"jitter": "half"}, ValueError, "jitter must be one of none, full, equal, got 'half'"),
        ({"attempts": 0}, ValueError, "attempts must be an int >= 1 .*got 0"),
        ({"attempts": True}, ValueError, "attempts must be an int >= 1 .*got True"),
        ({"backoff": -1}, ValueError, "backoff must be a finite number >= 0, got -1"),
        (
            {"retry_on": (int,)},
            TypeError,
            "retry_on: expected an exception class .*got <class 'int'>",
        ),
        (
            {"give_up_on": ("json.loads",)},
            TypeError,
            "give_up_on: 'json.loads' is not an exception class",
        ),
        (
            {"retry_on": ("nowhere.Error",)},
            ValueError,
            "retry_on: exception class 'nowhere.Error' cannot be imported",
        ),
        ({"retry_on": ("not a path",)}, ValueError, "retry_on: expected .*got 'not a path'"),
        ({"rng": 0.5}, TypeError, "rng must be a function"),
    ],
)
def test_bad_policies_are_refused_naming_the_value(
    options: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        RetryPolicy(**options)  # type: ignore[arg-type]


def test_exception_classes_are_kept_as_dotted_paths() -> None:
    import json

    policy = RetryPolicy(
        retry_on=(ConnectionError, "TimeoutError", "json.JSONDecodeError", ConnectionError),
        give_up_on=json.decoder.JSONDecodeError,  # type: ignore[arg-type]
    )
    assert policy.retry_on == (
        "builtins.ConnectionError",
        "builtins.TimeoutError",
        "json.decoder.JSONDecodeError",
    )
    assert policy.give_up_on == ("json.decoder.JSONDecodeError",)
    assert RetryPolicy(retry_on=("socket.timeout",)).retry_on == ("builtins.TimeoutError",)


def test_error_names_are_the_mro_of_the_raised_type() -> None:
    assert error_names(ConnectionResetError) == (
        "builtins.ConnectionResetError",
        "builtins.ConnectionError",
        "builtins.OSError",
        "builtins.Exception",
        "builtins.BaseException",
    )


def test_no_filter_retries_every_error() -> None:
    assert RetryPolicy().refusal(error_names(ValueError)) == ""


def test_retry_on_retries_its_classes_and_their_subclasses_only() -> None:
    policy = RetryPolicy(retry_on=(ConnectionError,))
    assert policy.refusal(error_names(ConnectionError)) == ""
    assert policy.refusal(error_names(ConnectionResetError)) == ""
    assert policy.refusal(error_names(ValueError)) == (
        "not retried: ValueError is not in retry_on (builtins.ConnectionError)"
    )


def test_give_up_on_wins_over_retry_on() -> None:
    policy = RetryPolicy(retry_on=(OSError,), give_up_on=("ConnectionRefusedError", KeyError))
    assert policy.refusal(error_names(ConnectionResetError)) == ""
    assert policy.refusal(error_names(ConnectionRefusedError)) == (
        "not retried: ConnectionRefusedError is in give_up_on"
    )
    assert policy.refusal(error_names(KeyError)) == "not retried: KeyError is in give_up_on"


def test_give_up_on_a_base_class_names_it() -> None:
    policy = RetryPolicy(give_up_on=(LookupError,))
    assert policy.refusal(error_names(KeyError)) == (
        "not retried: KeyError is a builtins.LookupError, in give_up_on"
    )
    assert policy.refusal(error_names(ValueError)) == ""


def test_a_failure_without_an_exception_is_not_filtered() -> None:
    # A timeout or a lost run: retried by attempts and backoff whatever the filters.
    policy = RetryPolicy(retry_on=(ConnectionError,), give_up_on=(TimeoutError,))
    assert policy.refusal(None) == ""


def test_a_class_local_to_a_function_matches_by_its_qualified_name() -> None:
    class Flaky(ConnectionError):
        pass

    policy = RetryPolicy(give_up_on=(Flaky,))
    assert policy.give_up_on == (f"{__name__}.{Flaky.__qualname__}",)
    assert policy.refusal(error_names(Flaky)).endswith("is in give_up_on")
    assert policy.refusal(error_names(ConnectionError)) == ""


def test_a_backoff_reports_the_delay_it_returned_even_with_jitter() -> None:
    backoff = Backoff(RetryPolicy(2, jitter="full", rng=Steps(0.25, 0.75)))
    assert backoff.failed() == 0.5
    assert backoff.delay == 0.5
    assert backoff.failed() == 3.0
    assert backoff.delay == 3.0
