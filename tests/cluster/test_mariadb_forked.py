"""The tests of tests/cluster/test_forked.py on MariaDB, on the site of the MariaDB pass
(its nodes poll every 0.5 s: no ``NOTIFY`` there)."""

from __future__ import annotations

import pytest

from tests.cluster.conftest import MariaDBNodesSite
from tests.cluster.test_forked import *  # noqa: F403

pytestmark = [pytest.mark.mariadb, pytest.mark.slow]


@pytest.fixture
def site(mariadb_site: MariaDBNodesSite) -> MariaDBNodesSite:
    return mariadb_site
