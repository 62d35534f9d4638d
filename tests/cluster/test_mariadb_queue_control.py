"""A queue paused, limited and resumed under real ``runscheduler`` processes on
MariaDB: the test of tests/cluster/test_queue_control.py on the site of the MariaDB
pass, whose nodes hear a queue change at their next poll (0.5 s there; no ``NOTIFY``)."""

from __future__ import annotations

import pytest

from tests.cluster.conftest import MariaDBNodesSite
from tests.cluster.test_queue_control import (
    test_every_node_hears_a_pause_a_limit_and_a_resume_and_a_new_one_starts_paused,
)

__all__ = ["test_every_node_hears_a_pause_a_limit_and_a_resume_and_a_new_one_starts_paused"]

pytestmark = [pytest.mark.mariadb, pytest.mark.slow]


@pytest.fixture
def site(mariadb_site: MariaDBNodesSite) -> MariaDBNodesSite:
    return mariadb_site
