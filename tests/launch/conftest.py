"""One real two-node Ray cluster for the launcher's Ray tests of a session (ray_cluster.py): it
takes 10-20 s to start and stop on a shared 2-core machine, so the tests share it."""

from __future__ import annotations

import os

import pytest
from ray_cluster import MultiNodeRay, netns_available


@pytest.fixture(scope="session")
def ray_cluster():
    why_not = netns_available()
    if why_not:
        pytest.skip(f"Ray cluster tests: {why_not}")
    cluster = MultiNodeRay(f"lab-rc-{os.getpid()}", nodes=2)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()  # cluster.shutdown() in the process that owns it, then the namespace
