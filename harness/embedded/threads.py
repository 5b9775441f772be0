"""One intra-op thread in every embedded process: the trainer, its TP peer, the engine server, the scorer.

Why one: a run's numbers must not depend on how many runs share the machine, and the launcher runs
several at once (harness.launch.parallel), one a core. The tiny model's operands are too small for a
second thread to help a run alone (a 30-rollout fp8 run: 6.5 s with two threads, 7.1 s with one,
2-core Xeon), and beside another run a second thread only spins at its barrier: two runs at once
with two threads each took 155 s, with one thread each 7.6 s for both.

Set before anything builds a thread pool or starts an engine: vLLM's CPU worker replaces
``torch.set_num_threads`` with a no-op once its engine starts, and every process this one starts
(TP peer, engine server) reads OMP_NUM_THREADS when it imports torch.
"""

from __future__ import annotations

import os

THREADS = 1


def pin() -> int:
    """Give this process and the processes it starts THREADS intra-op threads; the count in force."""
    import torch

    os.environ["OMP_NUM_THREADS"] = str(THREADS)
    torch.set_num_threads(THREADS)
    return torch.get_num_threads()
