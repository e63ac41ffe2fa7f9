"""Fixtures shared by the simulator tests: a 2-rank cluster per test module, TF2 or TF1 mode (the ranks
keep their state from test to test within a module)."""

import pytest

from npu_migrate_nb.sim.cluster import Cluster


@pytest.fixture(scope="module")
def tf2_cluster():
    with Cluster(n=2) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def tf1_cluster():
    with Cluster(n=2, tf1=True) as cluster:
        yield cluster
