"""The records backend: runs that already happened on a VIME cluster, judged from --runs-dir.

It launches nothing, so it needs no trainer command, output flags or slots of its own (the base
class refuses to launch); what it says is what its runs are: VIME's, from a cluster.
"""

from __future__ import annotations

from harness.spec.backends.base import Backend

BACKEND = Backend(
    name="records",
    knob_section="vime",
    replicate_section="cluster",
    on_cluster=True,
    launches=False,
    runs_of="vime",
    trainer_in_repo=False,
    long_runs=False,
)
