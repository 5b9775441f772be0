"""The embedded run: build the parts, then one GRPO step per rollout, as VIME orders them.

Per rollout: generate (vLLM) -> rewards/advantages -> share with TP ranks -> no-grad log-prob
recompute with the weights the engine holds (Megatron) -> optimizer step(s) -> weight sync ->
dumps. ``step`` returns the metric dicts; the caller prints them in VIME's line shapes.
"""

from __future__ import annotations

import logging
import resource
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from harness.embedded import capture, dumps, factory, fp8, linear_operator, numeric_faults, operator_calls, weight_digest
from harness.embedded import logprobs as lp
from harness.embedded import true_on_policy as true_on_policy_mode
from harness.embedded.data import load_prompts, tokenizer_hash
from harness.embedded.engine import EngineConfig, SamplingSpec
from harness.embedded.grpo import LossConfig, policy_loss, sample_mean
from harness.embedded.megatron_model import num_experts
from harness.embedded.policy import LogprobSpec, Policy, micro_batches
from harness.embedded.rollout import collect, prompt_batch
from harness.embedded.samples import Sample, TrainerView, fingerprint
from harness.embedded.settings import Settings
from harness.embedded.true_on_policy import kernel_patches, trainer_kernels
from harness.layout.sample_mean import micro_batch_share
from harness.layout.token_shift import response_loss_mask

log = logging.getLogger("harness.embedded")


class InputError(ValueError):
    """Bad input found while building: one line for the user."""


@dataclass
class StepReport:
    rollout: dict
    steps: list[tuple[int, dict]]
    perf: dict
    extra_lines: list[str] = field(default_factory=list)


def _mean(xs) -> float:
    xs = list(xs)
    return float(sum(xs) / len(xs)) if xs else 0.0


def expected_operators(settings) -> list[dict]:
    """What the run's flags ask each side to run, as (side, pass, operator) triples: the counts must
    show every one of them (harness/judge/candidate_execution.py). Flags only; nothing is counted here."""
    if settings.logprob_operator != lp.NATIVE:
        trainer = rollout = settings.logprob_operator
    elif "trainer-engine-log-softmax" in settings.levers:
        trainer, rollout = lp.TRUE_ON_POLICY, lp.NATIVE
    else:
        trainer, rollout = (lp.REPLAY if settings.replay_processed else lp.NATIVE), lp.NATIVE
    out = [
        {"side": operator_calls.TRAINER, "pass": operator_calls.RECOMPUTE, "operator": trainer},
        {"side": operator_calls.TRAINER, "pass": operator_calls.TRAINING, "operator": trainer},
        {"side": operator_calls.ROLLOUT, "pass": operator_calls.SAMPLER, "operator": rollout},
    ]
    if "engine-rounded-residual" in settings.levers:
        from harness.embedded.true_on_policy.engine_settings import ROUNDED_RESIDUAL

        out.append({"side": operator_calls.ROLLOUT, "pass": operator_calls.ENGINE_NORM, "operator": ROUNDED_RESIDUAL})
    return out + linear_operator.expected_operators(settings.linear_operator)


class EmbeddedRun:
    def __init__(self, s: Settings, *, tp_rank: int) -> None:
        self.s, self.tp_rank = s, tp_rank
        self.is_main = tp_rank == 0
        self.engine = None
        self.trainer_version = 0
        self._shard_rows: list[dict] = []
        self._recompute_counted: dict[str, int] = {}  # the trainer's recompute tokens per operator, up to the last step
        self._linear_counted: dict[str, int] = {}  # the trainer's linear-operator rows per operator, up to the last step

    # ---------------------------------------------------------------- build
    def build(self, store_path: str) -> None:
        from safetensors.torch import load_file
        from transformers import AutoConfig, AutoTokenizer

        from harness.embedded.megatron_cpu import init_distributed, init_model_parallel

        s = self.s
        self.model_dir = factory.resolve(s.hf_checkpoint, "model")
        if not (self.model_dir / "config.json").is_file():
            raise InputError(f"--hf-checkpoint {self.model_dir}: not an HF checkpoint (no config.json)")
        self.prompt_path = prompt_path = factory.resolve(s.prompt_data, "data")
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.tok_hash = tokenizer_hash(self.model_dir)
        self.prompts = load_prompts(
            prompt_path,
            self.tokenizer,
            input_key=s.input_key,
            label_key=s.label_key,
            chat_template=s.apply_chat_template,
            max_response_len=s.max_response_len,
        )
        self.hf_config = AutoConfig.from_pretrained(self.model_dir)
        experts = num_experts(self.hf_config)
        if s.num_experts is not None and s.num_experts != experts:
            raise InputError(f"--num-experts {s.num_experts}: the checkpoint has {experts} experts")
        if s.routing_replay and not experts:
            raise InputError(f"--use-rollout-routing-replay: {s.hf_checkpoint} is a dense model (no experts); routing replay needs an MoE checkpoint")
        if s.routing_replay and not s.colocate:
            raise InputError(
                "--use-rollout-routing-replay: the embedded non-colocate engine serves /v1/completions, which returns no routed experts; run it --colocate"
            )
        if s.faults.rollout_fp8_weight_scale and not s.fp8:
            # Without fp8 no weight block has a scale to read back wrong: the control would do nothing.
            raise InputError("--embedded-inject rollout-fp8-weight-scale: needs --vllm-quantization fp8 (the rollout holds no fp8 weights to scale)")
        if s.faults.rollout_fp8_weight_bits and not s.fp8:
            raise InputError("--embedded-inject rollout-fp8-weight-bits: needs --vllm-quantization fp8 (the rollout holds no fp8 weights to round)")
        hf_state = {}
        for f in sorted(self.model_dir.glob("*.safetensors")):
            hf_state.update(load_file(str(f)))
        torch.manual_seed(s.seed)
        true_on_policy_mode.configure(s.levers)  # before the policy and engine are built
        init_distributed(self.tp_rank, s.tp, store_path)
        init_model_parallel(s.tp, s.seed)
        problems = numeric_faults.install(s.faults, engine_in_process=s.colocate and s.tp == 1)  # before the engine binds its sampler
        if problems:
            raise InputError(problems[0])
        # the kernel levers wrap what the controls installed (a lever replaces its layer's kernel, control included)
        trainer_kernels.configure_rollout(fp8_rollout=s.fp8)
        kernel_patches.install_if_needed(s.levers)
        if s.linear_operator != linear_operator.NATIVE:
            if experts:
                raise InputError(
                    f"--embedded-linear-operator {s.linear_operator}: dense models only (the engine runs the experts through its fused-MoE method)"
                )
            linear_operator.install_in_trainer(s.linear_operator, fp8_rollout=s.fp8)  # after the levers and controls: it wraps them
        self.policy = Policy(
            self.hf_config,
            hf_state,
            bf16=s.bf16,
            tp=s.tp,
            tp_rank=self.tp_rank,
            lr=s.lr,
            betas=s.betas,
            weight_decay=s.weight_decay,
            clip_grad=s.clip_grad,
            true_on_policy=s.true_on_policy,
            lever_spec=bool(s.levers & set(true_on_policy_mode.LAYER_SPEC)),
        )
        self.sampling = SamplingSpec(
            n=s.n_samples,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,
            max_tokens=s.max_response_len,
            stop_token_ids=[self.hf_config.eos_token_id],
        )
        # fp8: the engine computes with e4m3-rounded weights from version 0 on, rounded from the
        # policy's weights as every later sync rounds them (not from the checkpoint: an fp32 file's
        # blocks have other amax scales than the bf16 policy's, so other e4m3 weights)
        initial = self.policy.full_hf_state() if s.fp8 else None  # collective under TP
        if self.is_main:
            self.engine = self._start_engine()
            if s.fp8:
                self.engine.update_weights(fp8.quantize_state_dict(initial), 0)

    def _start_engine(self):
        s = self.s
        cfg = EngineConfig(
            model=self.model_dir,
            dtype=s.vllm_dtype,
            logprobs_mode=s.logprobs_mode,
            seed=s.seed,
            fp8=s.fp8,
            log_path=Path(s.output_dir) / "vllm_server.log" if s.output_dir else None,
            true_on_policy=true_on_policy_mode.any_on(true_on_policy_mode.ENGINE),
            # R3 needs the rollout's routing; on any colocated MoE run it is captured anyway, so the
            # dumps (and the audit) can say where the trainer routed a token differently.
            return_routed_experts=s.routing_replay or bool(num_experts(self.hf_config) and s.colocate and s.tp == 1),
            routed_experts_required=s.routing_replay,
            logprob_operator=s.logprob_operator,
            linear_operator=s.linear_operator,
        )
        if s.output_dir:
            Path(s.output_dir).mkdir(parents=True, exist_ok=True)
        if s.colocate:
            from harness.embedded.engine import InProcessEngine

            return InProcessEngine(cfg, multiprocess=s.tp > 1)
        from harness.embedded.engine_server import ServerEngine

        return ServerEngine(cfg)

    @property
    def engine_mode(self) -> str:
        if not self.s.colocate:
            return "non-colocate: vLLM OpenAI server subprocess on 127.0.0.1"
        if self.s.tp > 1:
            return "colocate: vllm.LLM in the trainer (engine core in a child process, TP=2)"
        return "colocate: vllm.LLM in the trainer process (VLLM_ENABLE_V1_MULTIPROCESSING=0)"

    # ---------------------------------------------------------------- one step
    def _share(self, samples: list[Sample] | None) -> list[Sample]:
        if self.s.tp == 1:
            return samples
        box = [samples]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def _logprob_spec(self) -> LogprobSpec:
        f = self.s.faults
        return LogprobSpec(
            temperature=1.0 if f.no_temperature else self.s.temperature,
            top_k=self.s.top_k,
            top_p=self.s.top_p,
            replay=self.s.replay_processed,
            target_shift=1 if f.token_shift else 0,
            slice_shift=-1 if f.mask_off_by_one else 0,
            true_on_policy="trainer-engine-log-softmax" in self.s.levers,
            gather_row="trainer-engine-gather" in self.s.levers,
            operator=self.s.logprob_operator,
        )

    def _recompute(self, samples: list[Sample], spec: LogprobSpec, want_probe: int):
        """The no-grad old-log-prob pass over the whole rollout, micro-batch by micro-batch."""
        views: list[TrainerView | None] = [None] * len(samples)
        probes, fallback = [], 0
        shard_rows = []  # under TP, every rank's vocab shard for the probe samples (probe 5)
        sampling = dict(self.sampling.as_dict(), trainer_temperature=spec.temperature)
        for m, idx in enumerate(micro_batches([len(samples[i].tokens) + 1 for i in range(len(samples))], self.s.max_tokens_per_micro_batch)):
            seqs = [(samples[i].tokens, len(samples[i].prompt_ids), len(samples[i].response_ids)) for i in idx]
            values, extra = self.policy.forward_micro(seqs, spec, grad=False, diagnostics=True, routed=self._routed(samples, idx))
            fallback += extra["fallback_tokens"]
            diag = {k: torch.split(v, extra["split"]) for k, v in extra["diag"].items()}
            hidden = torch.split(extra["hidden"], extra["split"])
            targets = torch.split(extra["targets"], extra["split"])
            logits_shard = torch.split(extra["logits_shard"], extra["split"])
            for off, i in enumerate(idx):
                s = samples[i]
                views[i] = TrainerView(
                    log_probs=values[off].float(),
                    rank=diag["rank"][off],
                    inside_filter_set=diag["inside_filter_set"][off],
                    vocab_shard=diag["vocab_shard"][off],
                    entropy=diag["entropy"][off],
                    micro_batch=m,
                    offset=off,
                    weight_version=self.trainer_version,
                    routed_experts=extra["used_experts"][off] if "used_experts" in extra else None,
                    target_ids=targets[off].clone(),
                    fingerprint=fingerprint(
                        token_ids=s.tokens,
                        response_ids=s.response_ids,
                        loss_mask=s.loss_mask,
                        sampling=self.sampling.as_dict(),
                        tokenizer_hash=self.tok_hash,
                        weight_version=self.trainer_version,
                        dp_rank=0,
                        micro_batch=m,
                        offset=off,
                    ),
                )
                if self.s.tp > 1 and i < self.s.probe_samples:
                    shard_rows.append({"index": s.index, "logits_shard": logits_shard[off].clone(), "target_ids": targets[off].clone()})
                if i < want_probe:
                    probes.append(
                        {
                            "index": s.index,
                            "hidden_states": hidden[off].clone(),
                            "target_ids": targets[off],
                            "loss_mask": torch.tensor(s.loss_mask),
                            "sampling": sampling,
                            "rollout_log_probs": torch.tensor(s.rollout_log_probs),
                            "trainer_log_probs": values[off].float().clone(),
                            "weight_version_rollout": s.rollout_weight_version,
                            "weight_version_trainer": self.trainer_version,
                        }
                    )
        self._shard_rows = shard_rows
        return views, probes, fallback

    def _routed(self, samples: list[Sample], idx: list[int]) -> list | None:
        """R3: the rollout's routed experts of these samples, for the routers to replay (recompute and training forward)."""
        return [samples[i].rollout_routed_experts for i in idx] if self.s.routing_replay else None

    def _seen_rollout_logprobs(self, samples: list[Sample]) -> tuple[list[list[float]], list[dict]]:
        """The rollout log-probs (and their fingerprints) as the trainer receives them."""
        lps = [s.rollout_log_probs for s in samples]
        fps = [s.rollout_fingerprint for s in samples]
        if self.s.faults.reorder_samples:
            lps, fps = lps[1:] + lps[:1], fps[1:] + fps[:1]
        if self.s.faults.reorder_samples:
            # The injected fault itself: another sample's log-probs, cut or zero-filled to this
            # response, as a reordering of one field would deliver them (probe 1 must catch it).
            return [(lp_ + [0.0] * len(s.response_ids))[: len(s.response_ids)] for lp_, s in zip(lps, samples)], fps
        for lp_, sample in zip(lps, samples):
            if len(lp_) != len(sample.response_ids):
                # Never padded: a zero log-prob is a real value (p = 1) and would pass as agreement.
                # 13,440 samples of the P1/P3 runs (2026-12) all had equal lengths.
                raise ValueError(
                    f"sample {sample.index}: the rollout returned {len(lp_)} log-probs for a {len(sample.response_ids)}-token "
                    "response; the trainer cannot compare them token by token"
                )
        return lps, fps

    def step(self, rollout_id: int) -> StepReport | None:
        s = self.s
        t_step = time.perf_counter()
        samples, rollout_time, kv = None, 0.0, None
        engine_weights = self._engine_weights() if self.is_main else None  # what the rollout computes with
        if self.is_main:
            t0 = time.perf_counter()
            samples = collect(
                self.engine,
                self.tokenizer,
                prompt_batch(self.prompts, rollout_id, s.rollout_batch_size),
                self.sampling,
                tokenizer_hash=self.tok_hash,
                std_normalise=s.std_normalise,
            )
            rollout_time = time.perf_counter() - t0
            kv = self.engine.kv_cache_usage()
        samples = self._share(samples)
        weights = self._weights_digest(engine_weights, samples)
        self._keep_weights(rollout_id, samples)

        spec = self._logprob_spec()
        t0 = time.perf_counter()
        taps = capture.start(self, rollout_id, samples)  # both engines' boundary tensors for the probe samples
        views, probes, fallback = self._recompute(samples, spec, s.probe_samples if self.is_main else 0)
        for v in views if weights else ():
            v.fingerprint["weights_sha"] = weights["trainer_sha"]
        log_probs_time = time.perf_counter() - t0
        capture.finish(self, taps, rollout_id, samples, spec, views)
        # The LM head the recompute used (before the optimizer moves it); collective under TP.
        probe_dir = self._probe_dir(rollout_id)
        lm_head = self.policy.lm_head_weight() if probe_dir is not None else None
        seen_lp, seen_fp = self._seen_rollout_logprobs(samples)
        for v, fp_ in zip(views, seen_fp):
            v.rollout_fingerprint = fp_
        masks = [response_loss_mask(x.loss_mask, len(x.tokens)) for x in samples]  # the layout's alignment, as the property tests check it
        roll_t = [torch.tensor(x, dtype=torch.float32) for x in seen_lp]
        old_t = [v.log_probs for v in views]

        t0 = time.perf_counter()
        step_metrics = self._train(samples, spec, old_t, roll_t, masks, [v.entropy for v in views], rollout_id)
        train_time = time.perf_counter() - t0

        t0 = time.perf_counter()
        synced = self._sync_weights(rollout_id)
        update_time = time.perf_counter() - t0

        if self._shard_rows and probe_dir is not None:
            dumps.vocab_shards(probe_dir, rollout_id, self.tp_rank, s.tp, self._shard_rows, self._merge_path(spec), spec.temperature)
        if not self.is_main:
            return None
        sampling = self.sampling.as_dict()
        if s.save_rollout:
            dumps.rollout_dump(s.save_rollout, rollout_id, samples, sampling)
        if s.save_train:
            dumps.train_dump(s.save_train, rollout_id, self.tp_rank, samples, views, sampling, s.tp, seen_lp, masks)
        if probes and probe_dir is not None:
            policy = {
                "train_dtype": self.policy.dtype_name,
                "rollout_dtype": s.vllm_dtype,
                "rollout_quantization": "fp8-e4m3-emulated" if s.fp8 else None,
                "logprobs_mode": s.logprobs_mode,
                "replay_processed": s.replay_processed,
                "logprob_operator": s.logprob_operator,
                "tp_size": s.tp,
                "injections": s.faults.names(),
                # probe 2: how many tensors the step's weight digests hashed (weight_digest.compare)
                "weight_digest": None if weights is None else {k: weights[k] for k in ("tensors", "not_comparable", "differing")},
            }
            dumps.probe_bundle(probe_dir, rollout_id, probes, lm_head, policy)

        lengths = [len(x.response_ids) for x in samples]
        rewards = [x.reward for x in samples]
        groups = [rewards[i : i + s.n_samples] for i in range(0, len(rewards), s.n_samples)]
        rollout_metrics = {
            "rollout/raw_reward": _mean(rewards),
            "rollout/rewards": _mean(x.advantage for x in samples),
            "rollout/advantages": _mean(x.advantage for x in samples),
            "rollout/log_probs": float(sample_mean(old_t, masks)),
            "rollout/rollout_log_probs": float(sample_mean(roll_t, masks)),
            "rollout/response_lengths": _mean(lengths),
            "rollout/total_lengths": _mean(len(x.tokens) for x in samples),
            "rollout/truncated": _mean(float(x.truncated) for x in samples),
            "rollout/truncated_ratio": _mean(float(x.truncated) for x in samples),
            "rollout/response_len/mean": _mean(lengths),
            "rollout/response_len/median": float(statistics.median(lengths)),
            "rollout/response_len/max": float(max(lengths)),
            "rollout/response_len/min": float(min(lengths)),
            "rollout/zero_std/count": float(sum(1 for g in groups if max(g) == min(g))),
            "rollout/weight_version": float(samples[0].rollout_weight_version),
        }
        step_time = time.perf_counter() - t_step
        tokens = sum(len(x.tokens) for x in samples)
        cores = torch.get_num_threads()  # the CPUs this run computes on (harness.embedded.threads)
        perf = {
            "perf/step_time": step_time,
            "perf/rollout_time": rollout_time,
            "perf/log_probs_time": log_probs_time,
            "perf/train_time": train_time,
            "perf/actor_train_time": train_time,
            "perf/update_weights_time": update_time,
            "perf/weights_synced": float(synced),
            "perf/tokens_per_cpu_per_sec": tokens / step_time / cores,
            "perf/peak_memory_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        }
        if kv is not None:
            perf["perf/kv_cache_usage"] = kv
        server_peak = self._server_peak_gb()
        if server_peak is not None:
            perf["perf/rollout_peak_memory_gb"] = server_peak
        counted = self._operator_calls(rollout_id)
        decisions = [dict(backend=counted["requested"], actual=counted["ran"], dtype=self.policy.dtype_name, tp=s.tp, fallback_tokens=fallback)]
        if s.linear_operator != linear_operator.NATIVE:
            decisions.append(
                dict(op=linear_operator.DECISION_OP, requested=s.linear_operator, ran=counted["linear"], dtype=self.policy.dtype_name, tp=s.tp)
            )
        return StepReport(rollout=rollout_metrics, steps=step_metrics, perf=perf, extra_lines=decisions)

    def _operator_calls(self, rollout_id: int) -> dict:
        """Both sides' counted operator calls so far, written to operator_calls.json (operator_calls.py);
        returns what the trainer was asked to run and what its recompute counted this step, for the
        execution decision line (which no longer says "actual = requested" by construction)."""
        s, problems = self.s, []
        try:
            rollout = self.engine.operator_calls()
        except Exception as err:  # noqa: BLE001 - the run goes on; the record says the engine side is not counted
            rollout = None
            problems.append(f"the engine's operator counts could not be read back ({type(err).__name__}: {' '.join(str(err).split())[:200]})")
        expected = expected_operators(s)
        record = {
            "format": operator_calls.FORMAT,
            "expected": expected,
            "engine_mode": self.engine_mode,
            "tp_rank": self.tp_rank,
            "rollouts_counted": rollout_id + 1,
            operator_calls.TRAINER: operator_calls.snapshot(operator_calls.TRAINER),
            operator_calls.ROLLOUT: rollout,
            "problems": problems,
        }
        operator_calls.write(s.output_dir, record)
        recompute = record[operator_calls.TRAINER]["passes"].get(operator_calls.RECOMPUTE, {})
        step = {op: v["tokens"] - self._recompute_counted.get(op, 0) for op, v in recompute.items()}
        self._recompute_counted = {op: v["tokens"] for op, v in recompute.items()}
        requested = next(e["operator"] for e in expected if e["side"] == operator_calls.TRAINER)
        linear = record[operator_calls.TRAINER]["passes"].get(linear_operator.LINEAR_PASS, {})
        linear_step = {op: v["tokens"] - self._linear_counted.get(op, 0) for op, v in linear.items()}
        self._linear_counted = {op: v["tokens"] for op, v in linear.items()}
        return {
            "requested": requested,
            "ran": {op: n for op, n in sorted(step.items()) if n > 0},
            "linear": {op: n for op, n in sorted(linear_step.items()) if n > 0},
        }

    @staticmethod
    def _merge_path(spec) -> str:
        """How the recompute turned the shards into log-probs: Megatron's vocab-parallel merge
        (native), or a path that gathers the full vocabulary first (no merge of shard statistics)."""
        if spec.operator != lp.NATIVE:
            return f"operator {spec.operator} (its own TP plan)"
        if spec.true_on_policy or spec.replay:
            return "full vocabulary gathered"
        return "vocab-parallel cross entropy"

    def _engine_weights(self) -> dict | None:
        try:
            return self.engine.weight_digest()
        except Exception as err:  # noqa: BLE001 - the run goes on; its records then lack probe 2's evidence
            log.warning("the engine's weights could not be read back (%s: %s); no weight digest this step", type(err).__name__, err)
            return None

    def _weights_digest(self, engine_weights: dict | None, samples: list[Sample]) -> dict | None:
        """Probe 2's evidence: the engine's weights (read back before it generated) and the trainer's
        (as the sync sends them), hashed in one layout; each side's digest goes into its record."""
        sent = self.policy.full_hf_state()  # collective under TP
        if not self.is_main:
            return None
        if engine_weights is None:  # not read back: probe 2 says "not checked", never a pass
            return None
        if self.s.fp8:
            sent = fp8.quantize_state_dict(sent)
        weights = weight_digest.compare(engine_weights, sent)
        for x in samples:
            x.rollout_fingerprint["weights_sha"] = weights["engine_sha"]
        if weights["differing"]:
            log.warning("weights differ between the engine and the trainer in %s", ", ".join(weights["differing"][:5]))
        return weights

    def _keep_weights(self, rollout_id: int, samples: list[Sample]) -> None:
        """The weights this rollout was generated with, for the drift budget's re-score (dumps.weights_due
        rollouts; TP=1, where the trainer holds them whole). Not kept when the engine holds another
        version than the trainer (a stale-weights fault): they would not be the sampling weights."""
        directory = Path(self.s.save_train).parent if self.s.save_train else None
        if directory is None or self.s.tp != 1 or not dumps.weights_due(rollout_id):
            return
        if any(x.rollout_weight_version != self.trainer_version for x in samples):
            return
        dumps.weights(directory, rollout_id, self.policy.full_hf_state(), self.trainer_version)

    def _probe_dir(self, rollout_id: int) -> Path | None:
        """Probe bundles go next to the train dumps (else into the output dir); None: no probes."""
        if self.s.probe_samples <= 0:
            return None
        if self.s.save_train:
            return Path(self.s.save_train.format(rollout_id=rollout_id, rank=self.tp_rank)).parent
        return Path(self.s.output_dir) if self.s.output_dir else None

    def _train(self, samples, spec, old_t, roll_t, masks, entropies, rollout_id) -> list[tuple[int, dict]]:
        s = self.s
        cfg = LossConfig(
            eps_clip=s.eps_clip,
            eps_clip_high=s.eps_clip_high,
            use_tis=s.use_tis,
            tis_clip=s.tis_clip,
            tis_clip_low=s.tis_clip_low,
            per_token=s.per_token_loss,
        )
        out = []
        gbs = s.global_batch_size
        for k in range(s.steps_per_rollout):
            chunk = list(range(k * gbs, (k + 1) * gbs))
            sums: dict[str, float] = {}
            for idx_local in micro_batches([len(samples[i].tokens) + 1 for i in chunk], s.max_tokens_per_micro_batch):
                idx = [chunk[j] for j in idx_local]
                seqs = [(samples[i].tokens, len(samples[i].prompt_ids), len(samples[i].response_ids)) for i in idx]
                cur, _ = self.policy.forward_micro(seqs, spec, grad=True, routed=self._routed(samples, idx))
                loss, metrics = policy_loss(
                    cur, [old_t[i] for i in idx], [roll_t[i] for i in idx], [samples[i].advantage for i in idx], [masks[i] for i in idx], cfg
                )
                # The micro-batch's share of the step's mean (by samples; by tokens with --calculate-per-token-loss)
                weight = micro_batch_share([masks[i] for i in idx], [masks[i] for i in chunk], cfg.per_token)
                self.policy.backward(loss * weight)
                for name, value in metrics.items():
                    sums[name] = sums.get(name, 0.0) + float(value) * weight
            grad_norm = self.policy.optimizer_step()
            abs_diff = sample_mean([(old_t[i] - roll_t[i]).abs() for i in chunk], [masks[i] for i in chunk], s.per_token_loss)
            metrics = {f"train/{k_}": v for k_, v in sums.items()}
            metrics.update(
                {
                    "train/loss": sums["pg_loss"],  # entropy and KL coefficients are 0
                    "train/entropy_loss": float(sample_mean([entropies[i] for i in chunk], [masks[i] for i in chunk])),
                    "train/train_rollout_logprob_abs_diff": float(abs_diff),
                    "train/grad_norm": grad_norm,
                    "train/lr": s.lr,
                    "train/step": float(rollout_id * s.steps_per_rollout + k),
                }
            )
            out.append((rollout_id * s.steps_per_rollout + k, metrics))
        self.trainer_version += 1
        return out

    def _sync_weights(self, rollout_id: int) -> bool:
        """Trainer -> engine after every step, unless a stale-weights fault skips it."""
        if rollout_id < self.s.faults.stale_weights:
            return False
        hf_state = self.policy.full_hf_state()  # collective under TP
        if self.is_main:
            if self.s.fp8:
                hf_state = fp8.quantize_state_dict(hf_state)
            self.engine.update_weights(hf_state, self.trainer_version)
        return True

    def _server_peak_gb(self) -> float | None:
        proc = getattr(self.engine, "proc", None)
        if proc is None:
            return None
        try:
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**20
        except OSError:
            return None
        return None

    def close(self, process_exiting: bool = False) -> None:
        if self.engine is not None:
            self.engine.close(process_exiting)
            self.engine = None
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
