"""Non-colocate rollout: a separate vLLM OpenAI server on 127.0.0.1, as VIME's rollout talks to
its engines. Weight sync goes through the server's dev endpoints (VLLM_SERVER_DEV_MODE=1):
save the checkpoint, /pause, /collective_rpc reload_weights, /reset_prefix_cache, /resume.
The server is this trainer's child; it is stopped by its own pid (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from harness.embedded import fp8, logprob_operator, operator_calls, true_on_policy, vllm_cpu_fixes, weight_digest
from harness.embedded.engine import (
    KV_CACHE_BYTES,
    MAX_MODEL_LEN,
    WORKER_EXTENSION,
    Completion,
    EngineConfig,
    EngineStartError,
    SamplingSpec,
    _save_weights,
)
from harness.embedded.true_on_policy import engine_settings as true_on_policy_engine

START_TIMEOUT_S = 180


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][-300:] if lines else ""


class ServerEngine:
    def __init__(self, cfg: EngineConfig) -> None:
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.weights_dir = Path(tempfile.mkdtemp(prefix="embedded-weights-"))
        self.log_path = cfg.log_path or self.weights_dir / "vllm_server.log"
        env = dict(os.environ, VLLM_SERVER_DEV_MODE="1")
        env[fp8.ENV_FLAG] = "1" if cfg.fp8 else "0"
        env[vllm_cpu_fixes.ENV_FLAG] = "1"
        # The API server always runs its engine core in a process of its own; with multiprocessing
        # off, vLLM's CPU platform keeps the engine core's worker in that process (uni executor)
        # instead of spawning a third one that imports torch and vLLM again. Measured on a 3-rollout
        # P3 non-colocate run (2-core AMD EPYC, 2026-12-02): 65 s -> 45-47 s.
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        env[logprob_operator.ENV_FLAG] = cfg.logprob_operator
        env[true_on_policy.ENV_FLAG] = "1" if cfg.true_on_policy else "0"
        if cfg.true_on_policy:
            env.update(true_on_policy_engine.env())
        # reach the engine processes vLLM spawns (see engine_site/sitecustomize.py)
        site = Path(__file__).resolve().parent / "engine_site"
        repo = Path(__file__).resolve().parents[2]
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), str(repo), env.get("PYTHONPATH", "")) if p)
        cmd = [
            sys.executable,
            "-m",
            "harness.embedded.vllm_server",
            "--model",
            str(cfg.model),
            "--served-model-name",
            "policy",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dtype",
            cfg.dtype,
            "--seed",
            str(cfg.seed),
            "--enforce-eager",
            "--max-model-len",
            str(MAX_MODEL_LEN),
            "--kv-cache-memory-bytes",
            str(KV_CACHE_BYTES),
            "--logprobs-mode",
            cfg.logprobs_mode,
            "--max-logprobs",
            "1",
            "--worker-extension-cls",  # the weight digest and the boundary capture (worker_extension.py)
            WORKER_EXTENSION,
        ]
        if cfg.true_on_policy:
            cmd += true_on_policy_engine.server_args()
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self._wait_healthy()
        self.version = 0
        self.fp8_unconfirmed = cfg.fp8

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.close()
                raise EngineStartError(f"vLLM server exited with code {self.proc.returncode}: {_last_line(self.log_path)} (log: {self.log_path})")
            try:
                if requests.get(self.base + "/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.5)
        self.close()
        raise EngineStartError(f"vLLM server not healthy after {START_TIMEOUT_S}s (log: {self.log_path})")

    def _post(self, path: str, payload: dict | None = None, timeout: float = 120) -> dict:
        r = requests.post(self.base + path, json=payload or {}, timeout=timeout)
        if r.status_code != 200:
            raise RuntimeError(f"vLLM server {path}: HTTP {r.status_code}: {r.text[:300]}")
        return r.json() if r.content else {}

    def generate(self, prompts: list[list[int]], spec: SamplingSpec) -> list[list[Completion]]:
        body = {
            "model": "policy",
            "prompt": prompts,
            "n": spec.n,
            "temperature": spec.temperature,
            "top_p": spec.top_p,
            "top_k": spec.top_k,
            "max_tokens": spec.max_tokens,
            "logprobs": 0,
            "return_tokens_as_token_ids": True,
            "stop_token_ids": spec.stop_token_ids,
            "skip_special_tokens": False,
        }
        choices = sorted(self._post("/v1/completions", body)["choices"], key=lambda c: c["index"])
        if self.fp8_unconfirmed:
            self._confirm_fp8()
        result: list[list[Completion]] = [[] for _ in prompts]
        for c in choices:
            lp = c["logprobs"]
            ids = [int(t.split(":", 1)[1]) for t in lp["tokens"]]
            result[c["index"] // spec.n].append(
                Completion(ids, [float(x) for x in lp["token_logprobs"]], [None] * len(ids), c.get("finish_reason") or "", self.version)
            )
        return result

    def _confirm_fp8(self) -> None:
        """The emulation is installed inside the server's engine process by a hook
        (engine_site/sitecustomize.py); if it never ran, the run would be bf16 labelled fp8."""
        self.log.flush()
        if fp8.ANNOUNCEMENT not in self.log_path.read_text(errors="replace"):
            raise EngineStartError(
                f"fp8 activation emulation did not reach the vLLM server's engine process "
                f"(no {fp8.ANNOUNCEMENT!r} line in {self.log_path}); the run would not be fp8"
            )
        self.fp8_unconfirmed = False

    def update_weights(self, hf_sd: dict, version: int) -> None:
        path = _save_weights(hf_sd, self.weights_dir / "sync")
        self._post("/pause")
        try:
            self._post("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(path), "is_checkpoint_format": True}})
            self._post("/reset_prefix_cache")
        finally:
            self._post("/resume")
        self.version = version

    def weight_digest(self) -> dict:
        """{parameter name: dtype, shape, sha} of the weights the server's engine holds now."""
        return self.worker_call(weight_digest.WORKER_METHOD)

    def operator_calls(self) -> dict:
        """The log-prob operator calls counted inside the server's engine process (operator_calls.py)."""
        return self.worker_call(operator_calls.WORKER_METHOD)

    def worker_call(self, method: str, **kwargs):
        """A method of the server's vLLM worker (worker_extension.py) through /collective_rpc; its
        result, which the server sends as JSON (kwargs: strings, the endpoint's rule)."""
        return self._post("/collective_rpc", {"method": method, "kwargs": kwargs})["results"][0]

    def reset_prefix_cache(self) -> None:
        self._post("/reset_prefix_cache")

    def kv_cache_usage(self) -> float | None:
        try:
            text = requests.get(self.base + "/metrics", timeout=5).text
        except requests.RequestException:
            return None
        for line in text.splitlines():
            if line.startswith("vllm:kv_cache_usage_perc"):
                return float(line.rsplit(" ", 1)[1])
        return None

    def close(self, process_exiting: bool = False) -> None:  # noqa: ARG002 - the server is our child: always stopped
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # our own child's session, by its pid
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
