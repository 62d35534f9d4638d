"""Fixtures for the engine's unit tests: everything runs on a fake clock."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import settings

from django_htask.engine import FakeClock

# Property tests check results, not speed: a per-example deadline only makes them flaky
# on a loaded two-core CI machine.
settings.register_profile("htask", deadline=None)
settings.load_profile("htask")

START = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture
def clock() -> FakeClock:
    """A FakeClock at 2030-01-01T00:00Z; tests move it with ``advance``."""
    return FakeClock(START)
