"""Both engines' own tensors at every boundary, for every sample of a captured step, on the same tokens.

What a capture holds, per sample and per side (``trainer`` = Megatron, ``rollout`` = vLLM):

    embedding                 [L-1, H]  token embeddings (positions 0..L-2 of prompt+response)
    layer.{i}.attention       [L-1, H]  the attention block's output (o_proj / linear_proj)
    layer.{i}.mlp             [L-1, H]  the MLP block's output (down_proj / linear_fc2)
    layer.{i}.output          [L-1, H]  the residual stream after layer i
    final_norm                [L-1, H]  the final RMSNorm's output
    logits                    [R, V]    LM-head logits at the R response positions (full vocabulary)
    logsumexp                 [R]       the side's own log-sum-exp of logits / T (logit_t / T - log-prob)
    selected_logprob          [R]       log-softmax(logits / T) at the target (no filters), the side's own op
    processed_logprob         [R]       the side's processed contract (T, top-k, top-p), the side's own op
    recorded_logprob          [R]       what the side recorded in the run (rollout: decode; trainer: recompute)

How each side is captured:
- trainer: forward hooks on the Megatron GPTModel during the run's own no-grad recompute (the
  pass that produced the old log-probs), sliced out of the probe samples' micro-batch rows;
  selected / processed log-probs from the trainer's own operators (vocab-parallel cross entropy,
  the processed-contract replay) on the captured logits;
- rollout: forward hooks on vLLM's own model, installed and read back in whichever process the
  engine's worker runs (the trainer's, a TP=2 engine-core child, the non-colocate server's) through
  the worker extension (worker_extension.py, reached by the engine's ``worker_call``), on a prefill
  of prompt+response[:-1] right after the rollout (the rollout computed the response positions in
  decode steps: ``recorded_logprob`` beside ``processed_logprob`` measures that gap); logits from
  the model's own ``compute_logits`` in the worker, log-probs from vLLM's own ``TopKTopPSampler``
  (here, on those logits).
vLLM defers each residual add into the next layer's fused add-norm: its layer output is formed here
as hidden + residual, rounded to the model dtype, as that add-norm stores its residual.

The capture also holds the trainer's weights (HF names) at the recompute, the weights the engine
was synced with, so the boundary table (harness/attribution/boundaries.py) can measure each
operation's envelope at the declared precision against fp64 on the captured inputs.

How to call it (what the embedded trainer does at the rollouts in ``CAPTURE_ROLLOUTS``):

    taps = TrainerTaps(policy.model, keep_calls={0})       # hooks on; keep micro-batch 0's forward
    ... policy.forward_micro(...) for each micro-batch ...  # the recompute, as the run does it
    taps.close()
    trainer = trainer_side(taps.call(0), row, tokens, prompt_len, resp_len, temperature, top_k, top_p, recorded)
    rollout = rollout_side(engine, tokens, prompt_len, resp_len, temperature, top_k, top_p, recorded)
    write_capture(path, rollout_id, [CapturedSample(index, tokens, P, R, trainer, rollout)], policy, weights, unavailable=[])
    bundle = read_capture(path)                             # {"samples": [...], "policy": {...}, ...}

``trainer_side`` raises ``CaptureUnavailable`` (one line) under TP>1 (the logits are vocabulary
shards there), ``rollout_side`` where the worker's forward did not cover every position; the bundle
then says so under ``unavailable``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from harness.layout.token_shift import response_gather_positions

FORMAT = "vime-mismatch-lab/capture-v1"
# Captured at rollout 2 (the first after the warm-up steps the judge skips) and every tenth after:
# a 3-rollout test run gets one capture, a 30-rollout ladder run three (a few hundred kB each).
FIRST_CAPTURE, CAPTURE_EVERY = 2, 10
HIDDEN = ("embedding", "attention", "mlp", "output", "final_norm")
LOGPROB_KEYS = ("logsumexp", "selected_logprob", "processed_logprob", "recorded_logprob")


class CaptureUnavailable(RuntimeError):
    """A side that cannot be captured here; the message says why in one line."""


def capture_due(rollout_id: int) -> bool:
    return rollout_id >= FIRST_CAPTURE and (rollout_id - FIRST_CAPTURE) % CAPTURE_EVERY == 0


def boundary_names(num_layers: int) -> list[str]:
    """Every boundary in forward order."""
    names = ["embedding"]
    for i in range(num_layers):
        names += [f"layer.{i}.attention", f"layer.{i}.mlp", f"layer.{i}.output"]
    return names + ["final_norm", "logits", "logsumexp", "selected_logprob", "processed_logprob"]


def _first(output) -> torch.Tensor:
    return output if isinstance(output, torch.Tensor) else output[0]


# ---------------------------------------------------------------- trainer (Megatron) side
class TrainerTaps:
    """Forward hooks on a Megatron GPTModel; keeps the tensors of the forward calls in ``keep_calls``
    (0 = the first forward after the taps were installed). Megatron's layout is [s, b, ...]."""

    def __init__(self, model, keep_calls: set[int]) -> None:
        self.keep_calls, self.calls, self._count = set(keep_calls), {}, -1
        self._handles = [model.embedding.register_forward_pre_hook(self._start)]
        self._hook(model.embedding, "embedding")
        for i, layer in enumerate(model.decoder.layers):
            self._hook(layer.self_attention, f"layer.{i}.attention")
            self._hook(layer.mlp, f"layer.{i}.mlp")
            self._hook(layer, f"layer.{i}.output")
        self._hook(model.decoder.final_layernorm, "final_norm")
        self._hook(model.output_layer, "logits")

    def _start(self, _module, _inputs) -> None:
        self._count += 1

    def _hook(self, module, name: str) -> None:
        def keep(_module, _inputs, output) -> None:
            if self._count in self.keep_calls:
                self.calls.setdefault(self._count, {})[name] = _first(output).detach().clone()

        self._handles.append(module.register_forward_hook(keep))

    def call(self, number: int) -> dict[str, torch.Tensor]:
        if number not in self.calls:
            raise CaptureUnavailable(f"trainer capture: forward call {number} was not seen (calls kept: {sorted(self.calls)})")
        return self.calls[number]

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


def _log_probs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, top_k: int, top_p: float, processed: bool, operator: str = "native"
) -> torch.Tensor:
    """The trainer's own log-probs on its captured logits: Megatron's vocab-parallel cross entropy and
    the processed-contract replay, or, where the run's recompute counted ``true-on-policy``, the
    engine-formula log-softmax it ran (harness.embedded.true_on_policy.logprobs)."""
    from harness.embedded import logprobs as lp

    if operator == lp.TRUE_ON_POLICY:
        from harness.embedded.true_on_policy.logprobs import engine_logprobs

        return engine_logprobs(logits, targets, temperature, top_k if processed else -1, top_p if processed else 1.0, processed)[0]
    if processed:
        return lp.replay_logprobs(logits, targets, temperature, top_k, top_p)[0]
    return lp.vocab_parallel_logprobs(logits, targets, temperature)


def registry_operator(name: str | None):
    """The registry operator NAME (None for the engines' own paths: native, processed-replay, true-on-policy)."""
    from harness.embedded import logprob_operator
    from harness.embedded import logprobs as lp

    if name in (None, lp.NATIVE, lp.REPLAY, lp.TRUE_ON_POLICY):
        return None
    return logprob_operator.resolve(name)


def trainer_side(
    call: dict[str, torch.Tensor],
    row: int,
    tokens: list[int],
    prompt_len: int,
    response_len: int,
    temperature: float,
    top_k: int,
    top_p: float,
    recorded: torch.Tensor,
    shifts: tuple[int, int] = (0, 0),
    operator: str = "native",
    lm_weight: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """One sample's boundaries from a kept forward call (its row ``row`` of the micro-batch).
    ``shifts`` = (slice_shift, target_shift) the trainer ran with (injected framework faults).
    ``operator``: what the run's recompute counted (operator_calls.py); a registry operator computes
    ``selected_logprob`` from the LM head's operands (the final norm at the response positions and
    ``lm_weight``), as the trainer ran it."""
    length = len(tokens) - 1
    out = {name: t[:length, row] for name, t in call.items() if name != "logits"}
    cols, target_cols = response_gather_positions(prompt_len, response_len, *shifts)
    padded = torch.tensor(tokens + [0])
    targets = padded[target_cols]
    logits = call["logits"][cols, row]
    if torch.distributed.is_initialized() and _tp_size() > 1:
        raise CaptureUnavailable("trainer capture needs TP=1 (the logits are vocabulary shards under TP)")
    with torch.no_grad():
        out["logits"] = logits
        own = _log_probs(logits, targets, temperature, -1, 1.0, processed=False, operator=operator).double()
        out["processed_logprob"] = _log_probs(logits, targets, temperature, top_k, top_p, processed=True, operator=operator).double()
        # the log-sum-exp of the side's own logits (an operator on the LM head's operands keeps its own inside)
        out["logsumexp"] = (logits.float()[torch.arange(len(cols)), targets] / temperature).double() - own
        op = registry_operator(operator)
        if op is None:
            out["selected_logprob"] = own
        else:
            if lm_weight is None:
                raise CaptureUnavailable(f"trainer capture: operator {operator!r} needs the LM head's weight")
            out["selected_logprob"] = op.selected_logprobs(call["final_norm"][cols, row], lm_weight.detach(), targets, temperature).double()
    out["recorded_logprob"] = recorded.double()
    out["targets"] = targets
    return out


def _tp_size() -> int:
    from megatron.core import parallel_state

    return parallel_state.get_tensor_model_parallel_world_size() if parallel_state.model_parallel_is_initialized() else 1


# ---------------------------------------------------------------- rollout (vLLM) side
CAPTURE_START, CAPTURE_TAKE = "embedded_capture_start", "embedded_capture_take"  # worker_extension.py


def _vllm_hooks(model, store: dict) -> list:
    inner = model.model
    handles = []

    def keep(name):
        def hook(_module, _inputs, output):
            store[name] = tuple(x.detach().clone() for x in output) if isinstance(output, tuple) else output.detach().clone()

        return hook

    handles.append(inner.embed_tokens.register_forward_hook(keep("embedding")))
    for i, layer in enumerate(inner.layers):
        handles.append(layer.self_attn.register_forward_hook(keep(f"layer.{i}.attention")))
        handles.append(layer.mlp.register_forward_hook(keep(f"layer.{i}.mlp")))
        handles.append(layer.register_forward_hook(keep(f"layer.{i}.output")))
    handles.append(inner.norm.register_forward_hook(keep("final_norm")))
    return handles


class VllmTaps:
    """Forward hooks on vLLM's own model; runs where the model is (the engine's worker, through
    worker_extension.py). ``take`` removes them and returns each boundary of the forward they kept,
    and the model's own ``compute_logits`` of the final norm at the response positions."""

    def __init__(self, model) -> None:
        self.model, self.store = model, {}
        self.handles = _vllm_hooks(model, self.store)

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def take(
        self, response_cols: list[int], operator: str = "", targets: list[int] | None = None, temperature: float = 1.0
    ) -> dict[str, torch.Tensor]:
        """``operator``: a registry operator the engine's sampler ran (operator_calls.py): its
        selected log-probs of ``targets`` on the model's own LM-head operands come back as
        ``operator_logprob``, computed here, in the engine's process, as the sampler computes them."""
        self.close()
        out: dict[str, torch.Tensor] = {}
        for name, value in self.store.items():
            if name.endswith(".output"):  # (mlp output, residual before it): the stream is their sum
                hidden, residual = value
                value = (hidden.float() + residual.float()).to(hidden.dtype)
            elif isinstance(value, tuple):
                value = value[0]
            out[name] = value
        normed = out.get("final_norm")
        if normed is not None and response_cols and max(response_cols) < normed.shape[0]:
            with torch.inference_mode():
                out["logits"] = self.model.compute_logits(normed[response_cols]).detach().clone()
                op = registry_operator(operator or None)
                if op is not None and targets is not None:
                    vocab = out["logits"].shape[-1]
                    weight = self.model.lm_head.weight[:vocab]
                    picked = torch.tensor(targets, dtype=torch.long)
                    out["operator_logprob"] = op.selected_logprobs(normed[response_cols], weight, picked, float(temperature)).float().clone()
        return out


def encode_tensors(tensors: dict[str, torch.Tensor]) -> dict:
    """{name: {dtype, shape, hex of the raw bytes}}: plain data, exact to the bit, for any RPC (the
    server's /collective_rpc answers JSON only)."""
    return {
        name: {
            "dtype": str(t.dtype).removeprefix("torch."),
            "shape": list(t.shape),
            "hex": t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes().hex(),
        }
        for name, t in tensors.items()
    }


def decode_tensors(data: dict) -> dict[str, torch.Tensor]:
    out = {}
    for name, item in data.items():
        raw = torch.frombuffer(bytearray(bytes.fromhex(item["hex"])), dtype=torch.uint8)
        out[name] = raw.view(getattr(torch, item["dtype"])).reshape(item["shape"]).clone()
    return out


def _vllm_log_probs(logits: torch.Tensor, targets: torch.Tensor, temperature: float, top_k: int, top_p: float, mode: str, filtered: bool = False):
    """vLLM's own sampler path: fp32 logits, temperature (Sampler.apply_temperature), then
    TopKTopPSampler (apply_top_k_top_p and its log-softmax) as the engine's sampler runs them.
    ``filtered``: also return, per row, whether the filters removed a token (a -inf in the row)."""
    from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler
    from vllm.v1.sample.sampler import Sampler

    rows = logits.shape[0]
    x = Sampler.apply_temperature(logits.float().clone(), torch.full((rows,), float(temperature)), True)
    k = torch.full((rows,), top_k, dtype=torch.long) if top_k and top_k > 0 else None
    p = torch.full((rows,), float(top_p)) if top_p < 1.0 else None
    _, lp = TopKTopPSampler(logprobs_mode=mode)(x, {}, k, p)
    chosen = lp.gather(1, targets[:, None]).squeeze(1).double()
    return (chosen, ~torch.isfinite(lp).all(dim=1)) if filtered else chosen


def rollout_side(
    engine,
    tokens: list[int],
    prompt_len: int,
    response_len: int,
    temperature: float,
    top_k: int,
    top_p: float,
    recorded: torch.Tensor,
    operator: str = "native",
) -> dict[str, torch.Tensor]:
    """One sample's boundaries from vLLM's own model: a prefill of tokens[:-1] with hooks on, in
    whichever process the engine's worker runs (this one, the engine-core child, the server).
    ``operator``: what the engine's sampler counted (operator_calls.py); a registry operator's
    selected log-prob is computed in the worker on the model's own LM-head operands, and the
    processed log-prob is then formed as the sampler formed it (logprob_operator.rollout_logprobs)."""
    import json

    from harness.embedded.engine import SamplingSpec

    if not hasattr(engine, "worker_call"):
        raise CaptureUnavailable(f"rollout capture needs an engine whose worker it can call; this engine is {type(engine).__name__}")
    cols, target_cols = response_gather_positions(prompt_len, response_len)
    targets = torch.tensor(tokens)[target_cols]
    op = registry_operator(operator)
    engine.worker_call(CAPTURE_START)
    try:
        engine.reset_prefix_cache()  # a cached prefix would skip its positions in the forward
        # greedy: the capture's one token draws no random number from the run's sampling streams
        engine.generate([tokens[:-1]], SamplingSpec(n=1, temperature=0.0, top_p=1.0, top_k=-1, max_tokens=1))
    finally:
        extra = {"operator": op.name, "targets": json.dumps(targets.tolist()), "temperature": repr(float(temperature))} if op is not None else {}
        taken = engine.worker_call(CAPTURE_TAKE, response_cols=json.dumps(list(cols)), **extra)
    if "problem" in taken:
        raise CaptureUnavailable(f"rollout capture: {taken['problem']}")
    out = decode_tensors(taken)
    length = len(tokens) - 1
    for name, value in out.items():
        if name not in ("logits", "operator_logprob") and value.shape[0] != length:
            raise CaptureUnavailable(f"rollout capture: {name} holds {value.shape[0]} positions, expected {length} (a cached or chunked prefill)")
    if "logits" not in out:
        raise CaptureUnavailable("rollout capture: the worker computed no logits (no final norm at the response positions)")
    mode = "processed_logprobs"
    own = _vllm_log_probs(out["logits"], targets, temperature, -1, 1.0, mode)
    processed, filtered = _vllm_log_probs(out["logits"], targets, temperature, top_k, top_p, mode, filtered=True)
    out["logsumexp"] = (out["logits"].float()[torch.arange(len(cols)), targets] / temperature).double() - own
    out["selected_logprob"], out["processed_logprob"] = own, processed
    if op is not None:
        if "operator_logprob" not in out:
            raise CaptureUnavailable(f"rollout capture: the worker computed no log-probs with operator {op.name!r}")
        ran = out.pop("operator_logprob").double()
        out["selected_logprob"] = ran
        # The sampler's processed log-prob under the operator: the operator's raw log-prob at T,
        # less vLLM's own kept-mass term where the filters removed tokens from the row.
        out["processed_logprob"] = torch.where(filtered, ran - (own - processed), ran)
    out["recorded_logprob"] = recorded.double()
    out["targets"] = targets
    return out


# ---------------------------------------------------------------- bundle
@dataclass
class CapturedSample:
    index: int
    tokens: list[int]
    prompt_len: int
    response_len: int
    trainer: dict | None
    rollout: dict | None


def holds_text(num_layers: int) -> str:
    return (
        f"per sample of the step, trainer (Megatron, forward hooks on the recompute) and rollout (vLLM's own model, prefill "
        f"of prompt+response[:-1]) tensors at: {', '.join(boundary_names(num_layers))}, recorded_logprob; hidden "
        "boundaries at positions 0..L-2, logits and log-probs at the response positions; weights: the trainer's "
        "HF state dict at the recompute (what the engine was synced with)"
    )


def write_capture(path: Path, rollout_id: int, samples: list[CapturedSample], policy: dict, weights: dict | None, unavailable: list[str]) -> Path:
    """capture_{rollout_id}.pt: self-describing (``holds``); every sample of the step (~1 MB on the miniature)."""
    num_layers = int(policy.get("num_layers", 0))
    data = {
        "format": FORMAT,
        "holds": holds_text(num_layers),
        "rollout_id": rollout_id,
        "policy": policy,
        "unavailable": unavailable,
        "weights": weights,
        "samples": [vars(s) for s in samples],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(data, tmp)
    tmp.replace(path)
    return path


class CaptureProblem(ValueError):
    """A capture bundle that cannot be used; the message names the file and the key."""


def read_capture(path: Path) -> dict:
    path = Path(path)
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - one line for the reader
        raise CaptureProblem(f"{path}: not a readable capture bundle ({type(err).__name__}: {err})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CaptureProblem(
            f"{path}: key 'format': expected {FORMAT!r}, got {data.get('format') if isinstance(data, dict) else type(data).__name__!r}"
        )
    for key in ("policy", "samples", "unavailable"):
        if key not in data:
            raise CaptureProblem(f"{path}: key {key!r}: missing")
    return data


# ---------------------------------------------------------------- the embedded trainer's step
def start(run, rollout_id: int, samples: list) -> TrainerTaps | None:
    """Hooks on before the recompute, at a capture rollout with probe samples on (else None).
    Keeps the forward calls (micro-batches, packed as the recompute packs them) of every sample of
    the step: the logged abs-diff is a mean over all of them, so a capture of a few samples (one
    prompt's group) need not carry the drift it is meant to localise (coverage, boundaries.py)."""
    from harness.embedded.policy import micro_batches

    s = run.s
    if not run.is_main or s.probe_samples <= 0 or not capture_due(rollout_id) or run._probe_dir(rollout_id) is None:
        return None
    batches = micro_batches([len(x.tokens) + 1 for x in samples], s.max_tokens_per_micro_batch)
    where = {i: (m, off) for m, idx in enumerate(batches) for off, i in enumerate(idx)}
    taps = TrainerTaps(run.policy.model, keep_calls={m for m, _ in where.values()})
    taps.where = where
    return taps


def finish(run, taps: TrainerTaps | None, rollout_id: int, samples: list, spec, views: list) -> Path | None:
    """After the recompute (before the optimizer moves the weights): both sides of every sample of
    the step, written next to the probe bundle as capture_{rollout_id}.pt."""
    if taps is None:
        return None
    taps.close()
    rng = torch.random.get_rng_state()  # vLLM's CPU sampler draws its seeds from torch's RNG: leave the run's stream as it was
    try:
        return _finish(run, taps, rollout_id, samples, spec, views)
    finally:
        torch.random.set_rng_state(rng)


def _counted_operator(counts: dict | None, pass_: str, side: str, unavailable: list[str]) -> str:
    """The one operator a side's counts show in ``pass_`` (operator_calls.py); native with a note
    when they show none or several."""
    ran = sorted(op for op, v in ((counts or {}).get("passes", {}).get(pass_) or {}).items() if v.get("tokens", 0) > 0)
    if len(ran) == 1:
        return ran[0]
    unavailable.append(f"{side}: the counts show {ran or 'no operator'} in its {pass_} pass; selected_logprob computed with the native path")
    return "native"


def _finish(run, taps: TrainerTaps, rollout_id: int, samples: list, spec, views: list) -> Path:
    from harness.embedded import operator_calls

    s, unavailable, captured = run.s, [], []
    # The operator each side actually ran, from its own counts (not from the flags): the boundary
    # table's selected_logprob row is computed with it.
    try:
        engine_counts = run.engine.operator_calls()
    except Exception as err:  # noqa: BLE001 - a diagnostic must not end the run
        engine_counts = None
        unavailable.append(f"rollout: operator counts not read ({type(err).__name__})")
    used = {
        "trainer": _counted_operator(operator_calls.snapshot(operator_calls.TRAINER), operator_calls.RECOMPUTE, "trainer", unavailable),
        "rollout": _counted_operator(engine_counts, operator_calls.SAMPLER, "rollout", unavailable),
    }
    lm_weight = run.policy.output_weight_shard() if s.tp == 1 and registry_operator(used["trainer"]) is not None else None
    for i, (m, off) in sorted(taps.where.items()):
        x = samples[i]
        P, R = len(x.prompt_ids), len(x.response_ids)
        args = (x.tokens, P, R)
        trainer = rollout = None
        try:
            trainer = trainer_side(
                taps.call(m),
                off,
                *args,
                spec.temperature,
                s.top_k,
                s.top_p,
                views[i].log_probs,
                (spec.slice_shift, spec.target_shift),
                operator=used["trainer"],
                lm_weight=lm_weight,
            )
        except CaptureUnavailable as err:
            unavailable.append(f"trainer: {err}")
        except Exception as err:  # noqa: BLE001 - a diagnostic must not end the run; the table says "not checked" and why
            unavailable.append(f"trainer: capture failed: {type(err).__name__}: {' '.join(str(err).split())[:200]}")
        try:
            rollout = rollout_side(run.engine, *args, s.temperature, s.top_k, s.top_p, torch.tensor(x.rollout_log_probs), operator=used["rollout"])
        except CaptureUnavailable as err:
            unavailable.append(f"rollout: {err}")
        except Exception as err:  # noqa: BLE001 - a diagnostic must not end the run; the table says "not checked" and why
            unavailable.append(f"rollout: capture failed: {type(err).__name__}: {' '.join(str(err).split())[:200]}")
        captured.append(CapturedSample(int(x.index), list(x.tokens), P, R, trainer, rollout))
    rollout_dtype = next((str(c.rollout["embedding"].dtype).removeprefix("torch.") for c in captured if c.rollout), s.vllm_dtype)
    policy = {
        **_model_config(run.hf_config),
        "train_dtype": run.policy.dtype_name,
        "rollout_dtype": rollout_dtype,
        "rollout_quantization": "fp8-e4m3-emulated" if s.fp8 else None,
        "temperature": s.temperature,
        "trainer_temperature": spec.temperature,
        "top_k": s.top_k,
        "top_p": s.top_p,
        "logprobs_mode": s.logprobs_mode,
        "replay_processed": s.replay_processed,
        # the operator each side's selected_logprob was computed with: the one its own counts show
        "logprob_operator": used,
        "injections": s.faults.names(),
        "engine": run.engine_mode,
        "weight_version_trainer": run.trainer_version,
    }
    weights = run.policy.full_hf_state() if s.tp == 1 else None
    if weights is None:
        unavailable.append("weights: not kept under TP>1")
    path = Path(run._probe_dir(rollout_id)) / f"capture_{rollout_id}.pt"
    return write_capture(path, rollout_id, captured, policy, weights, sorted(set(unavailable)))


def _model_config(hf) -> dict:
    return {
        "num_layers": hf.num_hidden_layers,
        "hidden_size": hf.hidden_size,
        "num_attention_heads": hf.num_attention_heads,
        "num_key_value_heads": hf.num_key_value_heads,
        "head_dim": hf.head_dim,
        "rms_norm_eps": hf.rms_norm_eps,
        "rope_theta": float(hf.rope_parameters["rope_theta"]),
        "vocab_size": hf.vocab_size,
        "tie_word_embeddings": bool(hf.tie_word_embeddings),
    }
