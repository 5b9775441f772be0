"""Property tests of harness.layout: hypothesis, marker `property`.

The marker is registered here too, so this directory runs on its own under --strict-markers
(registering it twice is harmless). Example counts are set per test so the whole directory
stays well under a minute on two CPU cores; deadlines are off because torch's first calls are slow.
"""

import pytest
import torch


def pytest_configure(config):
    config.addinivalue_line("markers", "property: hypothesis property tests of the harness's own data-layout code")


@pytest.fixture(autouse=True)
def single_torch_thread():
    # The tensors here are tiny; on a busy 2-core machine torch's intra-op thread pool spends
    # more time waking threads than computing (measured: ~2 ms per `max` call, and the
    # directory took 50 s instead of 11 s). Restored after each test.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
