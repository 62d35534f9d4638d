"""The ported tests and the docs' list of those not ported cover django-tasks-db's
test suite exactly: every test method of ``tests/tests.py`` (django-tasks-db 0.13.0,
listed below from the source) is either ported here, marked with ``@source``, or named
in docs/django-tasks.md ("django-tasks-db's tests", table "Not ported") with a reason;
never both, never neither."""

from __future__ import annotations

import re
import unittest
from pathlib import Path

import pytest

pytest.importorskip(
    "django.tasks",
    reason="django.tasks needs Django >= 6.0; `make compat` runs these on Django 6.0/6.1",
)

from . import test_backend, test_prune, test_results, test_worker, test_worker_process

DOCS = Path(__file__).resolve().parents[3] / "docs" / "django-tasks.md"
SECTION = "## django-tasks-db's tests"
MODULES = (test_backend, test_prune, test_results, test_worker, test_worker_process)

#: Every test method of django-tasks-db 0.13.0's tests/tests.py, as ``Class::method``.
SOURCE_TESTS = frozenset(
    {
        "DatabaseBackendTestCase::test_using_correct_backend",
        "DatabaseBackendTestCase::test_enqueue_task",
        "DatabaseBackendTestCase::test_enqueue_task_async",
        "DatabaseBackendTestCase::test_get_result",
        "DatabaseBackendTestCase::test_get_result_async",
        "DatabaseBackendTestCase::test_refresh_result",
        "DatabaseBackendTestCase::test_refresh_result_async",
        "DatabaseBackendTestCase::test_get_missing_result",
        "DatabaseBackendTestCase::test_async_get_missing_result",
        "DatabaseBackendTestCase::test_invalid_uuid",
        "DatabaseBackendTestCase::test_async_invalid_uuid",
        "DatabaseBackendTestCase::test_invalid_task_path",
        "DatabaseBackendTestCase::test_missing_task_path",
        "DatabaseBackendTestCase::test_task_name",
        "DatabaseBackendTestCase::test_check",
        "DatabaseBackendTestCase::test_database_backend_app_missing",
        "DatabaseBackendTestCase::test_priority_range_check",
        "DatabaseBackendTestCase::test_doesnt_wait_until_transaction_commit",
        "DatabaseBackendTestCase::test_enqueue_logs",
        "DatabaseBackendTestCase::test_index_scan_for_ready",
        "DatabaseBackendTestCase::test_run_after_tz",
        "DatabaseBackendTestCase::test_run_after_null_0016_migration",
        "DatabaseBackendTestCase::test_validate_on_enqueue",
        "DatabaseBackendTestCase::test_validate_on_aenqueue",
        "DatabaseBackendTestCase::test_custom_id_function",
        "DatabaseBackendTestCase::test_unknown_id_function",
        "DatabaseBackendTestCase::test_postgres_db_id_function",
        "DatabaseBackendTestCase::test_postgres_id_function_expression",
        "DatabaseBackendWorkerTestCase::test_run_enqueued_task",
        "DatabaseBackendWorkerTestCase::test_batch_processes_all_tasks",
        "DatabaseBackendWorkerTestCase::test_no_tasks",
        "DatabaseBackendWorkerTestCase::test_doesnt_process_different_queue",
        "DatabaseBackendWorkerTestCase::test_process_all_queues",
        "DatabaseBackendWorkerTestCase::test_process_all_queues_excluding_one_queue",
        "DatabaseBackendWorkerTestCase::test_exclude_queues_requires_processing_all_queues",
        "DatabaseBackendWorkerTestCase::test_excluding_unknown_queue_processes_selected_queues",
        "DatabaseBackendWorkerTestCase::test_failing_task",
        "DatabaseBackendWorkerTestCase::test_complex_exception",
        "DatabaseBackendWorkerTestCase::test_complex_return_value",
        "DatabaseBackendWorkerTestCase::test_doesnt_process_different_backend",
        "DatabaseBackendWorkerTestCase::test_unknown_backend",
        "DatabaseBackendWorkerTestCase::test_incorrect_backend",
        "DatabaseBackendWorkerTestCase::test_negative_interval",
        "DatabaseBackendWorkerTestCase::test_infinite_interval",
        "DatabaseBackendWorkerTestCase::test_fractional_interval",
        "DatabaseBackendWorkerTestCase::test_zero_interval",
        "DatabaseBackendWorkerTestCase::test_negative_max_tasks",
        "DatabaseBackendWorkerTestCase::test_zero_max_tasks",
        "DatabaseBackendWorkerTestCase::test_too_long_worker_id",
        "DatabaseBackendWorkerTestCase::test_empty_worker_id",
        "DatabaseBackendWorkerTestCase::test_run_after",
        "DatabaseBackendWorkerTestCase::test_run_after_priority",
        "DatabaseBackendWorkerTestCase::test_verbose_logging",
        "DatabaseBackendWorkerTestCase::test_invalid_task_path",
        "DatabaseBackendWorkerTestCase::test_missing_task_path",
        "DatabaseBackendWorkerTestCase::test_worker_doesnt_exit_on_failure",
        "DatabaseBackendWorkerTestCase::test_worker_with_locked_rows",
        "DatabaseBackendWorkerTestCase::test_max_tasks",
        "DatabaseBackendWorkerTestCase::test_takes_context",
        "DatabaseBackendWorkerTestCase::test_context",
        "DatabaseBackendWorkerTestCase::test_task_import_string",
        "DatabaseTaskResultTestCase::test_cross_connection",
        "DatabaseTaskResultTestCase::test_locks_tasks",
        "DatabaseTaskResultTestCase::test_locks_tasks_sqlite",
        "DatabaseTaskResultTestCase::test_locks_tasks_filtered",
        "DatabaseTaskResultTestCase::test_locks_tasks_filtered_sqlite",
        "DatabaseTaskResultTestCase::test_lock_no_rows",
        "DatabaseTaskResultTestCase::test_get_locked_with_locked_rows",
        "ConnectionExclusiveTranscationTestCase::test_exclusive_transaction",
        "DatabaseBackendPruneTaskResultsTestCase::test_prunes_tasks",
        "DatabaseBackendPruneTaskResultsTestCase::test_doesnt_prune_new_tasks",
        "DatabaseBackendPruneTaskResultsTestCase::test_doesnt_prune_running_tasks",
        "DatabaseBackendPruneTaskResultsTestCase::test_only_prunes_specified_queue",
        "DatabaseBackendPruneTaskResultsTestCase::test_prune_all_queues",
        "DatabaseBackendPruneTaskResultsTestCase::test_min_age",
        "DatabaseBackendPruneTaskResultsTestCase::test_failed_min_age",
        "DatabaseBackendPruneTaskResultsTestCase::test_failed_min_age_zero",
        "DatabaseBackendPruneTaskResultsTestCase::test_dry_run",
        "DatabaseBackendPruneTaskResultsTestCase::test_unknown_backend",
        "DatabaseBackendPruneTaskResultsTestCase::test_incorrect_backend",
        "DatabaseBackendPruneTaskResultsTestCase::test_negative_age",
        "DatabaseWorkerProcessTestCase::test_run_subprocess",
        "DatabaseWorkerProcessTestCase::test_interrupt_no_tasks",
        "DatabaseWorkerProcessTestCase::test_interrupt_signals",
        "DatabaseWorkerProcessTestCase::test_repeat_ctrl_c",
        "DatabaseWorkerProcessTestCase::test_kill",
        "DatabaseWorkerProcessTestCase::test_system_exit_task",
        "DatabaseWorkerProcessTestCase::test_keyboard_interrupt_task",
        "DatabaseWorkerProcessTestCase::test_multiple_workers",
        "CompatTestCase::test_compat_has_django_task",
        "DBTaskResultOrderingTestCase::test_higher_priority_tasks_come_first",
        "DBTaskResultOrderingTestCase::test_earlier_run_after_comes_first_given_same_priority",
        "DBTaskResultOrderingTestCase::test_earlier_enqueued_at_comes_first_given_same_priority_and_run_after",
        "AdminTestCase::test_display_run_after_returns_empty_for_date_max_or_none",
        "AdminTestCase::test_display_run_after_returns_db_value",
    }
)

NAME = re.compile(r"`(\w+::\w+)`")


def docs_tables() -> dict[str, list[str]]:
    """The test names in the first column of each table of the docs' section, by the
    heading (``###``) the table is under."""
    text = DOCS.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    tables: dict[str, list[str]] = {}
    heading = ""
    for line in text[start : end if end != -1 else None].splitlines():
        if line.startswith("### "):
            heading = line[4:].strip()
        elif line.startswith("|") and heading:
            first_cell = line.split("|")[1]
            tables.setdefault(heading, []).extend(NAME.findall(first_cell))
    return tables


def ported_tests() -> dict[str, str]:
    """``Class::method`` of the ported test → the source test it names (``@source``)."""
    found: dict[str, str] = {}
    for module in MODULES:
        for cls in vars(module).values():
            if not (isinstance(cls, type) and issubclass(cls, unittest.TestCase)):
                continue
            if cls.__module__ != module.__name__:
                continue
            for name, member in vars(cls).items():
                if name.startswith("test"):
                    found[f"{cls.__name__}::{name}"] = getattr(member, "ported_from", "")
    return found


def test_every_ported_test_names_the_source_test_it_ports() -> None:
    for test, source in ported_tests().items():
        assert source == test, f"{test} is marked @source({source!r})"


def test_ported_and_not_ported_are_the_source_suite_exactly() -> None:
    ported = set(ported_tests().values())
    not_ported = docs_tables().get("Not ported", [])
    assert len(not_ported) == len(set(not_ported)), "a test is listed twice"
    assert ported & set(not_ported) == set(), "listed as not ported, yet ported"
    assert ported | set(not_ported) == SOURCE_TESTS


def test_the_differences_listed_are_of_ported_tests() -> None:
    differences = docs_tables().get("Ported with a difference", [])
    assert differences, "the docs' table of differences is missing"
    assert set(differences) <= set(ported_tests().values())
