"""Probes 3, 4, 5 and 7: the LM-head boundary on a probe bundle's fixed tokens.

Every figure is taken on the bundle's active tokens against a float64 reference on the same
operands, so what differs is the arithmetic of a path, never the data:

3. pre-softmax logits at the selected positions under each side's declared precision policy
   (fp32, bf16 logits, FP8 e4m3 with 1x128 activation / 128x128 weight blocks);
4. the same error split into the selected logit and the log-sum-exp;
5. the vocab-parallel log-sum-exp merge across TP shards vs the full-vocabulary reduce, on the
   shards a TP run recorded (harness.attribution.probe_vocab_shards; not checked at TP=1);
7. the registered operator paths (harness.operators.registry) on the same fixed tokens.

A probe "localises a boundary" (status fail) when the difference it isolates exceeds the fp32
floor (thresholds.fp32_floor_max_abs_diff): below it, fp32 arithmetic alone explains it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from harness.attribution.probe_bundle import ProbeBundle
from harness.attribution.probe_vocab_shards import probe_vocab_parallel_shards

FP8_BLOCK = 128
POLICY_NAMES = {"float32": "fp32 logits", "bfloat16": "bf16 logits", "float16": "fp16 logits", "fp8": "FP8 quantisation"}


def policy_of(dtype: str | None, quantization: str | None) -> str:
    if quantization and "fp8" in str(quantization).lower():
        return "fp8"
    dtype = str(dtype or "float32").removeprefix("torch.")
    return {"float": "float32", "bf16": "bfloat16", "half": "float16", "fp32": "float32"}.get(dtype, dtype)


def _pad_to(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Zero padding: a zero never raises a block's absmax nor changes a dot product."""
    return F.pad(x, (0, (-x.shape[1]) % cols, 0, (-x.shape[0]) % rows))


def _fp8_operands(hidden: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    from harness.operators.impl_fp8 import dequantize_blocks, quantize_blocks

    h = _pad_to(hidden.float(), 1, FP8_BLOCK)
    w = _pad_to(weight.float(), FP8_BLOCK, FP8_BLOCK)
    hq, hs = quantize_blocks(h, 1)
    wq, ws = quantize_blocks(w, FP8_BLOCK)
    return dequantize_blocks(hq, hs, 1), dequantize_blocks(wq, ws, FP8_BLOCK)[: weight.shape[0]]


def policy_logits(hidden: torch.Tensor, weight: torch.Tensor, policy: str, temperature: float) -> torch.Tensor:
    """fp32 logits / T as a path with this precision policy produces them (GEMM output rounded as declared)."""
    if policy == "fp8":
        h, w = _fp8_operands(hidden, weight)
        logits = (h @ w.T).to(torch.bfloat16).float()  # FP8 GEMMs write bf16 (vLLM's fp8 linear)
    elif policy in ("bfloat16", "float16"):
        dtype = getattr(torch, policy)
        logits = (hidden.to(dtype) @ weight.to(dtype).T).float()
    else:
        logits = hidden.float() @ weight.float().T
    return logits / temperature


def reference_logits(hidden: torch.Tensor, weight: torch.Tensor, temperature: float) -> torch.Tensor:
    return (hidden.double() @ weight.double().T) / temperature


def _stats(err: torch.Tensor) -> dict:
    err = err.double().abs()
    if err.numel() == 0:
        return {"mean": None, "max": None, "p99": None}
    return {"mean": float(err.mean()), "max": float(err.max()), "p99": float(torch.quantile(err, 0.99))}


class BundleNumerics:
    """The bundle's active tokens and both sides' declared policies, computed once for 3, 4, 5, 7."""

    def __init__(self, bundle: ProbeBundle, settings) -> None:
        active = bundle.active
        self.bundle = bundle
        self.hidden, self.targets = bundle.hidden[active], bundle.targets[active]
        self.weight = bundle.weight
        self.temperature = float(bundle.scalar("temperature", settings.temperature))
        # vLLM's fp8 (and the miniature's emulation of it) leaves the LM head unquantised: the LM-head
        # path runs in the rollout dtype, FP8 acts on the layers upstream of it.
        self.rollout_quantization = bundle.scalar("rollout_quantization", settings.rollout_quantization)
        self.rollout_quantized = policy_of(None, self.rollout_quantization) == "fp8"
        declared = bundle.scalar("rollout_dtype", settings.rollout_dtype)
        # vLLM's "auto" is the checkpoint's dtype, which the run settings resolve (probe_run.py)
        self.rollout_policy = policy_of(settings.rollout_dtype if declared == "auto" else declared, None)
        self.top_k = int(bundle.scalar("top_k", settings.top_k) or -1)
        self.top_p = float(bundle.scalar("top_p", settings.top_p) or 1.0)
        self.processed = "processed" in str(bundle.scalar("logprobs_mode", settings.logprobs_mode))
        self.trainer_temperature = float(bundle.scalar("trainer_temperature", bundle.scalar("temperature", settings.temperature)))
        self.replay_processed = bool(bundle.scalar("replay_processed", settings.replay_processed))
        self.trainer_policy = policy_of(bundle.scalar("trainer_dtype", settings.trainer_dtype), None)
        # --embedded-logprob-operator: both LM heads ran that registry operator, whose logits are fp32
        # from the (exactly upcast) operands whatever the side's dtype; upstream stays the side's.
        self.logprob_operator = str(bundle.scalar("logprob_operator", getattr(settings, "logprob_operator", "native")) or "native")
        self.head_policy = {
            side: "float32" if self.logprob_operator != "native" else policy
            for side, policy in (("rollout", self.rollout_policy), ("trainer", self.trainer_policy))
        }
        self.tp_size = int(bundle.scalar("tp_size", settings.tp_size) or 1)
        self.ref = reference_logits(self.hidden, self.weight, self.temperature)
        self.logits = {side: policy_logits(self.hidden, self.weight, policy, self.temperature) for side, policy in self.head_policy.items()}
        self.rollout_lp = None if bundle.rollout_log_probs is None else bundle.rollout_log_probs[active]
        self.trainer_lp = None if bundle.trainer_log_probs is None else bundle.trainer_log_probs[active]

    @property
    def tokens(self) -> int:
        return int(self.targets.numel())

    def observed_drift(self) -> float | None:
        if self.rollout_lp is None or self.trainer_lp is None or self.tokens == 0:
            return None
        return float((self.trainer_lp - self.rollout_lp).abs().mean())

    def rollout_path_log_probs(self) -> torch.Tensor:
        """What the rollout's LM-head path and declared contract give on the trainer's hidden states."""
        from harness.operators.sampling_filters import apply_top_k_top_p

        logits = self.logits["rollout"].clone()
        if not self.processed:
            logits = logits * self.temperature  # raw_logprobs are taken before temperature
        elif self.top_k > 0 or self.top_p < 1.0:
            logits, _ = apply_top_k_top_p(logits, self.top_k if self.top_k > 0 else None, self.top_p if self.top_p < 1.0 else None)
        return torch.log_softmax(logits, dim=1).gather(1, self.targets[:, None]).squeeze(1).double()

    def trainer_self_check(self) -> dict | None:
        """Does the bundle reproduce the trainer's own log-probs? (its hidden states, its LM-head weight,
        the trainer's dtype, temperature and contract). If not, it is not one snapshot of the trainer's
        computation - e.g. a weight captured after the optimizer step - and cannot localise upstream drift."""
        if self.trainer_lp is None or self.tokens == 0:
            return None
        from harness.operators.sampling_filters import apply_top_k_top_p

        logits = policy_logits(self.hidden, self.weight, self.head_policy["trainer"], self.trainer_temperature)
        if self.replay_processed and (self.top_k > 0 or self.top_p < 1.0):
            logits, _ = apply_top_k_top_p(logits, self.top_k if self.top_k > 0 else None, self.top_p if self.top_p < 1.0 else None)
        lp = torch.log_softmax(logits.double(), dim=1).gather(1, self.targets[:, None]).squeeze(1)
        return _stats(lp - self.trainer_lp)

    def lm_head_divergence(self) -> dict:
        """|rollout LM-head log-prob - trainer LM-head log-prob| on the same hidden states (raw contract)."""
        lp = {
            side: torch.log_softmax(self.logits[side].double(), dim=1).gather(1, self.targets[:, None]).squeeze(1) for side in ("rollout", "trainer")
        }
        return _stats(lp["rollout"] - lp["trainer"])

    def upstream_residual(self) -> dict | None:
        if self.rollout_lp is None or self.tokens == 0:
            return None
        return _stats(self.rollout_lp - self.rollout_path_log_probs())

    def selected(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.gather(1, self.targets[:, None]).squeeze(1).double()

    def side_errors(self, side: str) -> dict:
        logits = self.logits[side].double()
        sel_err = self.selected(logits) - self.selected(self.ref)
        lse_err = torch.logsumexp(logits, dim=1) - torch.logsumexp(self.ref, dim=1)
        return {"selected_logit": _stats(sel_err), "logsumexp": _stats(lse_err), "log_prob": _stats(sel_err - lse_err)}


def boundary_name(side: str, policy: str) -> str:
    return f"LM-head GEMM / {POLICY_NAMES.get(policy, policy)} of the {side} path"


def upstream_name(num: BundleNumerics) -> str:
    short = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
    rollout, trainer = short.get(num.rollout_policy, num.rollout_policy), short.get(num.trainer_policy, num.trainer_policy)
    if num.rollout_quantized:
        return (
            f"LM-head GEMM input (hidden states) / FP8 quantisation of the rollout path upstream of the LM head "
            f"(rollout {rollout} + FP8 vs trainer {trainer})"
        )
    return f"LM-head GEMM input (hidden states) / {rollout} arithmetic upstream of the LM head (rollout {rollout} vs trainer {trainer})"


def probe_logits(num: BundleNumerics, floor: float) -> dict:
    """Probe 3: the selected-position logits of each side's LM-head path vs fp64, and whether the
    rollout's log-probs follow from the trainer's hidden states through the rollout's own LM-head path
    (if not, the logits entering the softmax already differed: the boundary lies upstream of the LM
    head). Candidates are compared in log-prob units, the unit of the drift itself."""
    errors = {side: num.side_errors(side) for side in ("rollout", "trainer")}
    residual = num.upstream_residual()
    self_check = num.trainer_self_check()
    inconsistent = self_check is not None and (self_check["mean"] or 0.0) > floor
    if inconsistent:
        residual = None  # the trainer's hidden states cannot stand in for what reached the LM head
    # Where the two sides diverge: at the LM head (same hidden states, each side's own head), or before
    # it. A head both sides run alike (both bf16, say) is far from fp64 but adds no drift.
    divergence = num.lm_head_divergence()
    candidates = {"lm-head": divergence["mean"] or 0.0}
    if residual is not None:
        candidates["upstream"] = residual["mean"] or 0.0
    kind = max(candidates, key=candidates.get)
    localised = candidates[kind] > floor
    if kind == "upstream":
        side, policy = "rollout", "fp8" if num.rollout_quantized else num.rollout_policy
        boundary = upstream_name(num)
    else:
        side = max(errors, key=lambda k: errors[k]["log_prob"]["mean"] or 0.0)  # the less exact head
        policy = num.head_policy[side]
        boundary = boundary_name(side, policy)
    result = {"localised": localised and not inconsistent, "boundary": boundary if localised else None, "side": side, "policy": policy}
    if inconsistent:
        result["skipped"] = (
            "the bundle does not reproduce its own trainer log-probs within the fp32 floor "
            "(not one snapshot of the trainer's computation; see bundle_reproduces_trainer_log_probs)"
        )
    return {
        **result,
        "evidence": {
            "selected_logit_error_vs_fp64": {k: v["selected_logit"] for k, v in errors.items()},
            "lm_head_log_prob_error_vs_fp64": {k: v["log_prob"] for k, v in errors.items()},
            "lm_head_divergence_rollout_vs_trainer": divergence,
            "bundle_reproduces_trainer_log_probs": self_check,
            "bundle_inconsistent": inconsistent,
            "rollout_residual_from_trainer_hidden": residual,
            "largest": kind,
            "rollout_policy": num.rollout_policy,
            "rollout_quantization": num.rollout_quantization,
            "trainer_policy": num.trainer_policy,
            "floor": floor,
            "tokens": num.tokens,
            "observed_mean_abs_dlogp": num.observed_drift(),
        },
    }


def probe_lse_split(num: BundleNumerics, floor: float) -> dict:
    """Probe 4: the two sides' LM-head paths on the same hidden states, compared separately in the
    selected logit and in the log-sum-exp (each side against fp64 is in the evidence too)."""
    split = {side: num.side_errors(side) for side in ("rollout", "trainer")}
    rollout, trainer = num.logits["rollout"].double(), num.logits["trainer"].double()
    sel = _stats(num.selected(rollout) - num.selected(trainer))
    lse = _stats(torch.logsumexp(rollout, dim=1) - torch.logsumexp(trainer, dim=1))
    sel_mean, lse_mean = sel["mean"] or 0.0, lse["mean"] or 0.0
    part = "selected-logit gather" if sel_mean >= lse_mean else "vocab log-sum-exp reduction"
    localised = max(sel_mean, lse_mean) > floor
    side = max(split, key=lambda k: split[k]["log_prob"]["mean"] or 0.0)
    policy = num.head_policy[side]
    return {
        "localised": localised,
        "boundary": f"{boundary_name(side, policy)} ({part} differs most)" if localised else None,
        "side": side,
        "policy": policy,
        "evidence": {
            "rollout_vs_trainer": {"selected_logit": sel, "logsumexp": lse},
            "dominant_part": part,
            "each_side_vs_fp64": split,
            "floor": floor,
        },
    }


def probe_vocab_parallel(num: BundleNumerics, floor: float) -> dict:
    """Probe 5: the TP merge as the run executed it, on each rank's recorded vocab shard, against the
    full-vocabulary reduce (harness.attribution.probe_vocab_shards); not checked on a TP=1 run."""
    return probe_vocab_parallel_shards(num.bundle, num.tp_size, floor)


def _operand_dtype(policy: str) -> torch.dtype:
    return {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(policy, torch.float32)


# The LM-head path each side runs (FP8 rollouts keep an unquantised LM head: see BundleNumerics).
SIDE_PATHS = {"rollout": "vllm-native", "trainer": "megatron-native"}


def run_operator(name: str, num: BundleNumerics, dtype: torch.dtype) -> torch.Tensor:
    from harness.operators import registry

    hidden, weight = num.hidden.to(dtype), num.weight.to(dtype)
    if name.startswith("fp8-block"):
        hidden, weight = _pad_to(num.hidden.float(), 1, FP8_BLOCK), _pad_to(num.weight.float(), FP8_BLOCK, FP8_BLOCK)
        extra = weight.shape[0] - num.weight.shape[0]
        if extra:  # padded vocab rows would join the softmax: quantise the same way, softmax the real rows only
            return _fp8_block_unpadded(num)
    return registry.get(name).selected_logprobs(hidden, weight, num.targets, num.temperature, tp_size=1).double()


def _fp8_block_unpadded(num: BundleNumerics) -> torch.Tensor:
    logits = policy_logits(num.hidden, num.weight, "fp8", num.temperature)
    return torch.log_softmax(logits, dim=1).gather(1, num.targets[:, None]).squeeze(1).double()


def probe_paths(num: BundleNumerics, floor: float) -> dict:
    """Probe 7: every available registered path on the same fixed tokens, vs fp64 and vs each side's log-probs."""
    from harness.operators import registry

    ref = torch.log_softmax(num.ref, dim=1).gather(1, num.targets[:, None]).squeeze(1)
    table, outputs = {}, {}
    for name in registry.available_names():
        if "processed" in name:  # filter semantics belong to probe 6, not to the arithmetic
            continue
        dtype = _operand_dtype(num.trainer_policy if name == "megatron-native" else num.rollout_policy)
        try:
            out = run_operator(name, num, dtype)
        except Exception as err:  # an operator that cannot take these operands says why, the rest still run
            table[name] = {"error": f"{type(err).__name__}: {' '.join(str(err).split())[:160]}"}
            continue
        outputs[name] = out
        row = {"vs_fp64": _stats(out - ref), "operand_dtype": str(dtype).removeprefix("torch.")}
        for side, recorded in (("rollout", num.rollout_lp), ("trainer", num.trainer_lp)):
            if recorded is not None:
                row[f"vs_recorded_{side}"] = _stats(out - recorded)
        table[name] = row
    rollout_path, trainer_path = SIDE_PATHS["rollout"], SIDE_PATHS["trainer"]
    if num.logprob_operator != "native":  # both engines ran the selected operator (harness/embedded/logprob_operator.py)
        rollout_path = trainer_path = num.logprob_operator
    if rollout_path not in outputs or trainer_path not in outputs:
        return {"localised": False, "boundary": None, "skipped": f"{rollout_path} or {trainer_path} could not run", "evidence": {"paths": table}}
    gap = _stats(outputs[rollout_path] - outputs[trainer_path])
    drift = num.observed_drift()
    localised = (gap["mean"] or 0.0) > floor
    side = "rollout" if (table[rollout_path]["vs_fp64"]["mean"] or 0) >= (table[trainer_path]["vs_fp64"]["mean"] or 0) else "trainer"
    policy = num.head_policy[side]
    return {
        "localised": localised,
        "boundary": boundary_name(side, policy) if localised else None,
        "side": side,
        "policy": policy,
        "evidence": {
            "paths": table,
            "rollout_path": rollout_path,
            "trainer_path": trainer_path,
            "rollout_vs_trainer_path": gap,
            "observed_mean_abs_dlogp": drift,
            "explained_fraction": None if not drift or math.isnan(drift) else (gap["mean"] or 0.0) / drift,
            "floor": floor,
        },
    }
