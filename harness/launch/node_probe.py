"""Where a Ray job ran, described by the nodes themselves: run inside the job, before the trainer.

`python -m harness.launch.node_probe` is the first command of a Ray job's entrypoint
(harness.launch.ray_job.entrypoint; the harness package reaches the nodes with the job's runtime
environment). It connects to the job's cluster, runs one task on every alive node (pinned there, no
CPU or GPU reserved) that describes its machine (harness.records.environment.node_environment:
GPUs from nvidia-smi with driver, CUDA and MNNVL fabric state, CPU, library versions, container,
NCCL/CUDA/NVSHMEM variables with secrets redacted), and prints one line per node,
`LAB_PROVENANCE {json}`, which the log follower turns into the run's environment record. A probe
that fails says so on one line and the trainer starts anyway: provenance never stops a run.
"""

from __future__ import annotations

import json
import os
import sys

MARKER = "LAB_PROVENANCE"
TIMEOUT_S = 120.0


def _describe() -> dict:
    from harness.records.environment import node_environment

    return node_environment(os.environ.get("LAB_CONTAINER_IMAGE") or None)


def probe_all_nodes() -> list[dict]:
    """One description per alive node of the job's cluster (this node's alone without Ray)."""
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    except ImportError:
        return [{**_describe(), "note": "Ray is not importable here: this node only"}]
    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=False, logging_level="ERROR")
    try:
        describe = ray.remote(num_cpus=0)(_describe)
        alive = [node for node in ray.nodes() if node.get("Alive")]
        pending = [describe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)).remote() for node in alive]
        found = ray.get(pending, timeout=TIMEOUT_S)
        return [
            {**result, "ray_node_id": node["NodeID"], "ray_address": node.get("NodeManagerAddress")}
            for node, result in zip(alive, found, strict=True)
        ]
    finally:
        ray.shutdown()


def main() -> int:
    try:
        nodes = probe_all_nodes()
    except Exception as err:  # provenance never stops the run: say why and let the trainer start
        print(f"{MARKER}_FAILED {type(err).__name__}: {' '.join(str(err).split())[:300]}", flush=True)
        return 0
    for node in nodes:
        print(f"{MARKER} {json.dumps(node, sort_keys=True, default=str)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
