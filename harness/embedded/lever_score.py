"""``python -m harness.embedded.lever_score --job IN.json --out OUT.pt -- <VIME flags>``: re-score a
run's own sampled tokens, at the weights they were sampled with, under lever settings.

The configuration is the run's own flags (the trainer's argv), built as the trainer builds it
(``EmbeddedRun.build``: the checkpoint, the Megatron policy, the in-process vLLM engine, the run's
numerical controls), then for each rollout of the job:

- its weights (the trainer's state dict kept in the run's capture bundle at that rollout: what the
  engine was synced with, fp8-quantised here as the run quantised them; or, for a rollout sampled at
  weight version 0, the run's initial weights as its build made them) are loaded into both sides;
- for each lever setting (a set of switches, harness.embedded.true_on_policy), both sides score
  every response token without sampling anything:
  rollout side: one prefill of the sequences through the engine's own model (forward hooks, the
  engine-side switches set on the live engine: true_on_policy.engine_settings.apply_in_process),
  logits from the model's ``compute_logits``, log-probs from vLLM's own sampler ops under the run's
  contract (temperature, top-k/top-p, logprobs mode), as the rollout's sampler formed them;
  trainer side: the policy's no-grad log-prob pass (built with the setting's layer-spec switches,
  micro-batched as the recompute packs them), under the run's contract, or with the processed-
  logprob replay when the setting asks for it (a contract lever).
The rollout's re-score is a prefill; the run sampled in decode steps. ``recorded`` comes back beside
every rollout row so the caller can tell the two apart (on the runs measured they are equal, bit
for bit). One configuration per process: vLLM and Megatron's parallel state are process-global.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

from harness.embedded import flags as flag_table  # noqa: E402
from harness.embedded import fp8, threads, vllm_cpu_fixes  # noqa: E402

fp8.install_from_env()
vllm_cpu_fixes.install_from_env()

USAGE = "usage: python -m harness.embedded.lever_score --job IN.json --out OUT.pt -- <VIME flags>"
INITIAL = "initial"  # a rollout sampled at weight version 0: the run's own initial weights, as its build made them
# Framework faults change what is compared, not the arithmetic: a budget of their runs would
# re-score another contract. Numerical controls stay on (they are the run's arithmetic).
FRAMEWORK_FAULTS = ("stale_weights", "token_shift", "no_temperature", "mask_off_by_one", "reorder_samples")


class JobError(ValueError):
    """Bad scorer input: the message is the one line the user sees."""


def read_job(path: Path) -> dict:
    """{rollouts: [{rollout, weights, sequences: [{tokens, prompt_len, response_len, recorded}]}],
    settings: [{key, switches, replay}]}, checked."""
    try:
        job = json.loads(path.read_text())
        rollouts, settings = job["rollouts"], job["settings"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise JobError(f"{path}: expected JSON {{'rollouts': [...], 'settings': [...]}} ({exc})") from None
    for r, group in enumerate(rollouts):
        if group.get("weights") != INITIAL and not Path(str(group.get("weights"))).is_file():
            raise JobError(f"{path}: rollouts[{r}].weights: expected a capture bundle or {INITIAL!r}, got {group.get('weights')!r}")
        for i, row in enumerate(group.get("sequences") or []):
            tokens, p, n = row.get("tokens"), row.get("prompt_len"), row.get("response_len")
            if not (isinstance(tokens, list) and isinstance(p, int) and isinstance(n, int) and p >= 1 and n >= 1 and p + n == len(tokens)):
                raise JobError(f"{path}: rollouts[{r}].sequences[{i}]: expected tokens with prompt_len >= 1 + response_len >= 1 == len(tokens)")
    keys = [s.get("key") for s in settings]
    if len(set(keys)) != len(keys) or not all(isinstance(k, str) for k in keys):
        raise JobError(f"{path}: settings: expected a unique string key per setting")
    return job


def scoring_settings(settings):
    """The run's configuration as one in-process engine and one TP rank, no dumps, no probes."""
    if settings.tp != 1:
        raise JobError(f"--tensor-model-parallel-size {settings.tp}: the re-scorer builds one TP rank only")
    if getattr(settings, "routing_replay", False):
        raise JobError("--use-rollout-routing-replay: the re-scorer does not replay the rollout's routing")
    framework = [name for name in FRAMEWORK_FAULTS if getattr(settings.faults, name)]
    if framework:
        raise JobError(f"--embedded-inject {framework[0]}: a framework fault; the budget re-scores numerical configurations only")
    return replace(settings, colocate=True, output_dir=None, save_rollout=None, save_train=None, probe_samples=0)


# ---------------------------------------------------------------- rollout side
def _engine_model(engine):
    return engine.llm.collective_rpc(lambda worker: worker.model_runner.model)[0]


# Tokens one prefill call hands the engine: under vLLM's scheduler budget a batch is prefilled in one
# step, in request order. Past it the scheduler splits the batch over steps and a later step need not
# keep that order (a 128-sequence rollout of ~5,500 tokens came back with its positions out of order).
PREFILL_TOKENS = 2048


def prefill_groups(lengths: list[int], budget: int = PREFILL_TOKENS) -> list[list[int]]:
    """Consecutive indices of the sequences, each group's tokens within the budget (a longer sequence alone)."""
    groups: list[list[int]] = []
    total = 0
    for i, n in enumerate(lengths):
        if not groups or total + n > budget:
            groups.append([])
            total = 0
        groups[-1].append(i)
        total += n
    return groups


def _prefill_final_norm(engine, model, sequences: list[dict]) -> list:
    """The final norm's output at every position of each sequence's tokens[:-1], from batched prefills
    of at most PREFILL_TOKENS tokens each."""
    groups = prefill_groups([len(s["tokens"]) - 1 for s in sequences])
    return [normed for group in groups for normed in _prefill_once(engine, model, [sequences[i] for i in group])]


def _prefill_once(engine, model, sequences: list[dict]) -> list:
    """The final norm's output at every position of each sequence's tokens[:-1], from one batched prefill."""
    import torch

    from harness.embedded.engine import SamplingSpec

    hidden, positions = [], []
    inner = model.model
    h1 = inner.norm.register_forward_hook(lambda _m, _i, out: hidden.append((out if isinstance(out, torch.Tensor) else out[0]).detach().clone()))
    # the rotary module is shared by the layers: keep the positions of its first call in each forward
    h2 = inner.layers[0].self_attn.rotary_emb.register_forward_pre_hook(
        lambda _m, args: positions.append(args[0].detach().clone()) if len(positions) == len(hidden) else None
    )
    try:
        engine.reset_prefix_cache()  # a cached prefix would skip its positions
        # greedy, one token: nothing is sampled from the run's streams; the token is discarded
        engine.generate([s["tokens"][:-1] for s in sequences], SamplingSpec(n=1, temperature=0.0, top_p=1.0, top_k=-1, max_tokens=1))
    finally:
        h1.remove()
        h2.remove()
    flat, pos = torch.cat(hidden), torch.cat(positions)
    # requests are prefilled in order, each one's positions starting at 0 (chunks continue it)
    starts = (pos == 0).nonzero().flatten().tolist() + [len(pos)]
    lengths = [b - a for a, b in zip(starts, starts[1:])]
    if lengths != [len(s["tokens"]) - 1 for s in sequences]:
        raise RuntimeError(
            f"the prefill's positions do not split into the sequences given ({len(lengths)} runs of positions, {len(sequences)} sequences)"
        )
    return [flat[a:b] for a, b in zip(starts, starts[1:])]


def rollout_logits(engine, model, sequences: list[dict]):
    """The response positions' logits of every sequence from one prefill, through the model's
    compute_logits, with each position's target token and each sequence's length: (logits, picked, lengths)."""
    import torch

    from harness.layout.token_shift import response_gather_positions

    rows, targets = [], []
    for seq, normed in zip(sequences, _prefill_final_norm(engine, model, sequences)):
        cols, target_cols = response_gather_positions(seq["prompt_len"], seq["response_len"])
        rows.append(normed[cols])
        targets.append(torch.tensor(seq["tokens"])[target_cols])
    with torch.inference_mode():
        logits = model.compute_logits(torch.cat(rows))
    return logits, torch.cat(targets), [len(t) for t in targets]


def rollout_logprobs(engine, model, sequences: list[dict], s, logits=None) -> list[list[float]]:
    """Each response token's log-prob as the rollout's sampler forms it, from one prefill: the
    response positions' logits (rollout_logits, or `logits` already formed by it under the same
    forward) through the sampler's ops in one batch (rows are independent there, as in the rollout's
    own decode batch)."""
    import torch

    from harness.embedded.capture import _vllm_log_probs

    logits, picked, lengths = logits if logits is not None else rollout_logits(engine, model, sequences)
    if s.logprobs_mode == "raw_logprobs":
        values = logits.float().log_softmax(dim=-1).gather(1, picked[:, None]).squeeze(1)
    else:
        values = _vllm_log_probs(logits, picked, s.temperature, s.top_k, s.top_p, s.logprobs_mode)
    return [v.float().tolist() for v in torch.split(values, lengths)]


# ---------------------------------------------------------------- trainer side
def _policy(run, weights: dict):
    from harness.embedded import true_on_policy
    from harness.embedded.policy import Policy

    s = run.s
    return Policy(
        run.hf_config,
        weights,
        bf16=s.bf16,
        tp=1,
        tp_rank=0,
        lr=s.lr,
        betas=s.betas,
        weight_decay=s.weight_decay,
        clip_grad=s.clip_grad,
        true_on_policy=s.true_on_policy,
        lever_spec=bool(true_on_policy.active() & set(true_on_policy.LAYER_SPEC)),
    )


def trainer_logprobs(policy, sequences: list[dict], s, *, replay: bool) -> list[list[float]]:
    """The policy's no-grad log-probs of the response tokens, micro-batched as the recompute does."""
    from harness.embedded import true_on_policy
    from harness.embedded.policy import LogprobSpec, micro_batches

    spec = LogprobSpec(
        temperature=s.temperature,
        top_k=s.top_k,
        top_p=s.top_p,
        replay=replay,
        true_on_policy=true_on_policy.lever_on("trainer-engine-log-softmax"),
        gather_row=true_on_policy.lever_on("trainer-engine-gather"),
    )
    scored: list = [None] * len(sequences)
    for idx in micro_batches([len(x["tokens"]) + 1 for x in sequences], s.max_tokens_per_micro_batch):
        seqs = [(sequences[i]["tokens"], sequences[i]["prompt_len"], sequences[i]["response_len"]) for i in idx]
        values, _ = policy.forward_micro(seqs, spec, grad=False)
        for i, v in zip(idx, values):
            scored[i] = v.float().tolist()
    return scored


# ---------------------------------------------------------------- the job
FP8_SWITCHES = ("trainer-fp8-weights", "trainer-fp8-activations")


def effective(on: frozenset[str], s) -> frozenset[str]:
    """The switches that change a computation in this configuration: the fp8 switches do nothing
    where the rollout does not quantise (trainer_kernels), the reference filter nothing without
    top-k/top-p (vLLM's filter returns the logits untouched). A setting is computed once per
    effective set: settings that differ only in such switches compute the same thing."""
    idle = set(FP8_SWITCHES) if not s.fp8 else set()
    if not (0 < s.top_k) and s.top_p >= 1.0:
        idle.add("engine-reference-filter")
    return frozenset(on - idle)


def score(argv: list[str], job: dict) -> dict:
    """Both sides' log-probs of every sequence under every setting, per rollout."""
    import torch

    from harness.embedded import true_on_policy
    from harness.embedded.loop import EmbeddedRun
    from harness.embedded.megatron_model import hf_to_megatron, load_into
    from harness.embedded.settings import from_flags
    from harness.embedded.true_on_policy import engine_settings, kernel_patches

    values, _ = flag_table.parse(argv)
    s = scoring_settings(from_flags(values))
    settings = [(x["key"], true_on_policy.expand(x["switches"]), bool(x.get("replay"))) for x in job["settings"]]
    run = EmbeddedRun(s, tp_rank=0)
    timing = {"build": 0.0, "rollout": 0.0, "trainer": 0.0}
    t0 = time.perf_counter()
    try:
        run.build(os.path.join(tempfile.mkdtemp(prefix="lever-store-"), "store"))
        kernel_patches.install()  # after the run's numerical controls (build installed them)
        engine_settings.install_sampler_references()
        model = _engine_model(run.engine)
        initial = run.policy.full_hf_state()  # version 0, as the run's build made it (the engine holds it, fp8-quantised where it quantises)
        timing["build"] = time.perf_counter() - t0
        out = {key: {"rollout": [], "trainer": []} for key, _, _ in settings}
        recorded = []
        policies: dict[frozenset, object] = {}  # one policy per layer-spec configuration, weights reloaded per rollout
        for group in job["rollouts"]:
            sequences = group["sequences"]
            weights = initial if group["weights"] == INITIAL else torch.load(group["weights"], map_location="cpu", weights_only=True)["weights"]
            run.engine.update_weights(fp8.quantize_state_dict(weights) if s.fp8 else weights, int(group["rollout"]))
            recorded += [x["recorded"] for x in sequences]
            t0 = time.perf_counter()
            by_engine: dict[frozenset, list] = {}
            # The sampler's switches (read at each sampler call) leave the prefill and its logits as they
            # are: one forward per set of the other engine switches, its logits through each sampler setting.
            by_forward: dict[frozenset, tuple] = {}
            for key, on, _ in settings:
                engine_on = frozenset(n for n in effective(on, s) if true_on_policy.SWITCHES[n][0] == true_on_policy.ENGINE)
                if engine_on not in by_engine:
                    true_on_policy.configure(engine_on)
                    engine_settings.apply_in_process(model)
                    forward_on = engine_on - frozenset(true_on_policy.IN_PROCESS_ENGINE)
                    if forward_on not in by_forward:
                        by_forward[forward_on] = rollout_logits(run.engine, model, sequences)
                    by_engine[engine_on] = rollout_logprobs(run.engine, model, sequences, s, logits=by_forward[forward_on])
                out[key]["rollout"] += by_engine[engine_on]
            timing["rollout"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            megatron_weights, loaded, by_trainer = hf_to_megatron(weights, run.hf_config, 1, 0), set(), {}
            for key, on, replay in settings:
                trainer_on = frozenset(n for n in effective(on, s) if true_on_policy.SWITCHES[n][0] == true_on_policy.TRAINER)
                if (trainer_on, replay) not in by_trainer:
                    built = frozenset(trainer_on & set(true_on_policy.LAYER_SPEC))
                    true_on_policy.configure(trainer_on)  # the layer spec reads its switches at build, the kernels at every call
                    if built not in policies:
                        policies[built] = _policy(run, weights)
                    elif built not in loaded:
                        load_into(policies[built].model, megatron_weights)
                    loaded.add(built)
                    by_trainer[trainer_on, replay] = trainer_logprobs(policies[built], sequences, s, replay=replay or s.replay_processed)
                out[key]["trainer"] += by_trainer[trainer_on, replay]
            timing["trainer"] += time.perf_counter() - t0
    finally:
        run.close(process_exiting=True)
    return {
        "weights": "the run's own, per rollout (dumps/weights_N.pt or capture bundles; 'initial': the build's)",
        "rollout_side": "prefill through the engine's own model; log-probs by vLLM's sampler ops under the run's contract",
        "settings": out,
        "recorded": recorded,
        "seconds": timing,
    }


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[0] != "--job" or argv[2] != "--out" or argv[4] != "--":
        print(f"error: {USAGE}", file=sys.stderr)
        return 2
    job_path, out_path = Path(argv[1]), Path(argv[3])
    threads.pin()  # the same arithmetic whatever else runs (harness.embedded.threads)
    try:
        result = score(argv[5:], read_job(job_path))
    except (JobError, flag_table.FlagError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import torch

    tmp = out_path.with_name(out_path.name + ".tmp")
    torch.save(result, tmp)
    tmp.replace(out_path)  # atomic: a killed scorer leaves no half-written cache entry
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
