"""Rate limits and limits per key under real ``runscheduler`` processes on MariaDB:
the tests of tests/cluster/test_flow.py on the site of the MariaDB pass, with two
nodes (they hear of a task's end at their poll, 0.5 s there: no ``NOTIFY``; a rate
limit's window is waited for by each node's own timer, as on PostgreSQL)."""

from __future__ import annotations

import pytest

from tests.cluster.conftest import MariaDBNodesSite
from tests.cluster.test_flow import (
    test_a_key_never_runs_more_than_max_running_and_runs_that_many_while_work_waits,
    test_no_account_starts_more_than_its_rate_limit_in_any_window_through_a_kill,
)

__all__ = [
    "test_a_key_never_runs_more_than_max_running_and_runs_that_many_while_work_waits",
    "test_no_account_starts_more_than_its_rate_limit_in_any_window_through_a_kill",
]

pytestmark = [pytest.mark.mariadb, pytest.mark.slow]


@pytest.fixture
def site(mariadb_site: MariaDBNodesSite) -> MariaDBNodesSite:
    return mariadb_site


@pytest.fixture
def flow_nodes() -> int:
    return 2
