"""Tasks composed across real ``runscheduler`` nodes on MariaDB: the test of
tests/cluster/test_compose.py with two nodes, one killed with SIGKILL."""

from __future__ import annotations

import pytest

from tests.cluster.conftest import MariaDBNodesSite
from tests.cluster.test_compose import (
    test_a_graph_and_batches_end_exactly_once_across_nodes_one_killed,
)

__all__ = ["test_a_graph_and_batches_end_exactly_once_across_nodes_one_killed"]

pytestmark = [pytest.mark.mariadb, pytest.mark.slow]


@pytest.fixture
def site(mariadb_site: MariaDBNodesSite) -> MariaDBNodesSite:
    return mariadb_site
