"""Rollout routing replay (R3) on the Megatron side, and the experts each token actually used.

vLLM returns, per completion, the expert ids its routers chose for every token it forwarded:
``[prompt + response - 1, MoE layers, top-k]`` (the last sampled token is never forwarded), the
layout VIME keeps as ``rollout_routed_experts``. Megatron-Core's router replay
(``megatron/core/transformer/moe/router_replay.py``, on when the TransformerConfig sets
``moe_enable_routing_replay``) takes, per MoE layer, the top-k indices for every row its router
sees; those rows are the model's ``[seq, batch]`` positions flattened seq-major (the GPT model runs
``[s, b, h]``), so token ``p`` of batch row ``i`` is row ``p * batch + i``.

Rows the rollout did not forward (each sequence's last token and the batch padding) get experts
``0..k-1``: causal attention keeps those positions out of every logit the trainer reads, so
their routing cannot change a log-prob.
"""

from __future__ import annotations

import numpy as np
import torch


def routers(model) -> list:
    """The model's MoE routers in layer order (empty for a dense model)."""
    return [layer.mlp.router for layer in model.decoder.layers if hasattr(layer.mlp, "router")]


def replay_targets(experts: list[np.ndarray], lengths: list[int], width: int, layers: int, topk: int) -> list[torch.Tensor]:
    """Per MoE layer, the ``[width * batch, topk]`` int64 expert ids for the router's rows.

    ``experts[i]`` is sequence ``i``'s rollout routing ``[lengths[i] - 1, layers, topk]``."""
    batch = len(experts)
    targets = torch.arange(topk, dtype=torch.long).repeat(width * batch, layers, 1)  # [rows, L, k]
    for i, (routed, length) in enumerate(zip(experts, lengths)):
        routed = np.asarray(routed)
        if routed.shape != (length - 1, layers, topk):
            raise ValueError(
                f"rollout_routed_experts of sequence {i}: shape {routed.shape}, expected ({length - 1}, {layers}, {topk}) "
                "= (tokens - 1, MoE layers, top-k)"
            )
        rows = torch.arange(length - 1) * batch + i
        targets[rows] = torch.from_numpy(routed.astype(np.int64))
    return [targets[:, layer, :].contiguous() for layer in range(layers)]


class RoutingReplay:
    """Switches a model's routers between their own top-k and the rollout's experts, and records
    the experts each token was dispatched to in the last forward (the routing map's True columns)."""

    def __init__(self, model) -> None:
        from megatron.core.transformer.moe.router_replay import RouterReplay

        self.routers = routers(model)
        # Megatron keeps every RouterReplay in a class-level list; this class drives its own
        # model's instances directly, so the list would only keep old models alive.
        RouterReplay.clear_global_router_replay_instances()
        self.topk = self.routers[0].topk if self.routers else 0
        self.used: list[torch.Tensor] = []  # per layer [rows, num_experts] bool, from the last forward
        for router in self.routers:
            router.register_forward_hook(self._record_used)

    def _record_used(self, _module, _inputs, output) -> None:
        _probs, routing_map = output
        self.used.append(routing_map.detach().clone())

    def replay(self, experts: list[np.ndarray], lengths: list[int], width: int) -> None:
        from megatron.core.transformer.moe.router_replay import RouterReplayAction

        for router, target in zip(self.routers, replay_targets(experts, lengths, width, len(self.routers), self.topk)):
            router.router_replay.clear_indices()
            router.router_replay.set_target_indices(target)
            router.router_replay.set_router_replay_action(RouterReplayAction.REPLAY_FORWARD)

    def reset(self) -> None:
        """Back to the routers' own top-k (after every forward, replayed or not)."""
        for router in self.routers:
            router.router_replay.clear_indices()
            router.router_replay.clear_router_replay_action()

    def begin(self) -> None:
        """Before a forward: forget the previous forward's routing maps."""
        self.used.clear()

    def used_experts(self, batch: int, index: int, length: int) -> torch.Tensor:
        """Sequence ``index``'s experts in the last forward, ``[length - 1, layers, topk]`` ascending
        ids, read from the routing maps the routers returned (where the tokens were dispatched)."""
        rows = torch.arange(length - 1) * batch + index
        per_layer = [used[rows].nonzero()[:, 1].view(length - 1, self.topk) for used in self.used]
        return torch.stack(per_layer, dim=1)
