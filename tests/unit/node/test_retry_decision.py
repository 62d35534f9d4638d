"""The one decision whether a failed attempt is retried (``node.execution.retry_delay``),
with the store's row of a policy (``RetryColumns``), no database."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from django_htask.engine.backoff import JITTERS, KINDS, RetryPolicy, error_names
from django_htask.enums import RetryJitter, RetryKind
from django_htask.node.execution import retry_delay
from django_htask.store import RunOutcome
from django_htask.store.base import DEFAULT_RETRY, RetryColumns

NOW = datetime(2030, 1, 1, tzinfo=UTC)
SETTINGS = RetryPolicy(1, 3600)  # the node's RETRY_BACKOFF / RETRY_BACKOFF_MAX


def failed(error: type[BaseException] | None, *, retryable: bool = True) -> RunOutcome:
    extra: dict[str, Any] = {"retryable": retryable}
    if error is not None:
        extra["errors"] = error_names(error)
    text = f"{error.__name__}: x" if error is not None else "timed out"
    return RunOutcome("failed", "f", "f", "n", 1, None, NOW, NOW, error=text, extra=extra)


def decide(
    outcome: RunOutcome, columns: RetryColumns, attempt: int = 1, most: int = 3
) -> float | None:
    return retry_delay(outcome, attempt, most, lambda: columns.policy(1, 3600, SETTINGS))


def test_the_default_columns_are_the_nodes_settings_policy() -> None:
    assert DEFAULT_RETRY.policy(1, 3600, SETTINGS) is SETTINGS
    assert decide(failed(ValueError), DEFAULT_RETRY, attempt=2) == 2.0


def test_a_refused_error_fails_with_the_reason_added() -> None:
    outcome = failed(ValueError)
    assert decide(outcome, RetryColumns(retry_on="builtins.ConnectionError")) is None
    assert outcome.error == (
        "ValueError: x; not retried: ValueError is not in retry_on (builtins.ConnectionError)"
    )


def test_a_failure_without_an_exception_is_retried_whatever_the_filters() -> None:
    columns = RetryColumns(kind="fixed", backoff=4.0, retry_on="builtins.ConnectionError")
    assert decide(failed(None), columns) == 4.0


@pytest.mark.parametrize(
    ("outcome", "attempt"),
    [(failed(ConnectionError, retryable=False), 1), (failed(ConnectionError), 3)],
)
def test_an_abort_or_the_last_attempt_is_not_retried_and_says_nothing_more(
    outcome: RunOutcome, attempt: int
) -> None:
    assert decide(outcome, RetryColumns(give_up_on="builtins.ConnectionError"), attempt) is None
    assert outcome.error == "ConnectionError: x"


def test_a_stored_class_gone_from_the_code_stops_the_retries_saying_so() -> None:
    outcome = failed(ValueError)
    assert decide(outcome, RetryColumns(give_up_on="gone.module.Error")) is None
    assert outcome.error.startswith(
        "ValueError: x; not retried: its retry policy cannot be used: give_up_on: "
        "exception class 'gone.module.Error' cannot be imported"
    )


def test_a_success_is_not_retried_and_its_policy_not_built() -> None:
    ok = RunOutcome("succeeded", "f", "f", "n", 1, None, NOW, NOW)
    assert retry_delay(ok, 1, 3, lambda: pytest.fail("built")) is None


def test_the_columns_choices_are_the_engine_s_kinds_and_jitters() -> None:
    """The engine (no Django) and the model fields' choices name the same kinds and
    jitters: the engine's tuples are the rule, the choices their labels."""
    assert tuple(RetryKind.values) == KINDS
    assert tuple(RetryJitter.values) == JITTERS
