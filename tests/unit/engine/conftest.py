"""Fixtures for the engine's unit tests: everything runs on a fake clock."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from django_htask.engine import FakeClock

START = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture
def clock() -> FakeClock:
    """A FakeClock at 2030-01-01T00:00Z; tests move it with ``advance``."""
    return FakeClock(START)
