"""Locks and limits across real ``runscheduler`` processes on MariaDB: the tests of
tests/cluster/test_locks.py, on the site of the MariaDB pass (the claims of a lock or
function follow each other through row locks of the counter table there, and no
``NOTIFY`` tells the other nodes a lock is free)."""

from __future__ import annotations

import pytest

from tests.cluster.conftest import MariaDBNodesSite
from tests.cluster.test_locks import (
    test_a_node_killed_holding_a_lock_lets_its_other_tasks_go_on_within_node_timeout,
    test_three_nodes_never_overlap_a_lock_nor_exceed_max_running,
)

__all__ = [
    "test_a_node_killed_holding_a_lock_lets_its_other_tasks_go_on_within_node_timeout",
    "test_three_nodes_never_overlap_a_lock_nor_exceed_max_running",
]

pytestmark = [pytest.mark.mariadb, pytest.mark.slow]


@pytest.fixture
def site(mariadb_site: MariaDBNodesSite) -> MariaDBNodesSite:
    return mariadb_site
