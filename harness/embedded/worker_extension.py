"""The embedded trainer's methods on every vLLM worker (vLLM's ``worker_extension_cls``).

vLLM imports this module by name (``engine.WORKER_EXTENSION``) in whichever process builds a worker -
the trainer's own (colocate, TP=1), the engine-core child of a TP=2 trainer, the non-colocate
server's engine process - and mixes ``EmbeddedWorkerExtension`` into its worker class, so the
engine's ``worker_call`` (``collective_rpc``; the server's /collective_rpc) reaches these methods
there:

- ``embedded_weight_digest``: probe 2's read-back of the weights the worker's model holds
  (weight_digest.py);
- ``embedded_operator_calls``: the log-prob operator calls counted in the worker's process
  (operator_calls.py): the engine side's proof that the requested operator ran;
- ``embedded_capture_start`` / ``embedded_capture_take``: the rollout side of the boundary capture
  (capture.py): forward hooks on the worker's own model around one prefill, then the tensors they
  kept and the model's own ``compute_logits`` at the response positions, encoded as plain data
  (capture.encode_tensors: the server's /collective_rpc answers JSON only).

Importing this module installs the packing digest (weight_digest.install_packing_digest) in that
process: vLLM imports the extension before it loads the model, whose CPU linear layers may pack
their weights at load. It is imported by vLLM only, after vLLM itself: never at interpreter start
(see engine_site/sitecustomize.py for why that matters).
"""

from __future__ import annotations

import json

from harness.embedded import capture, operator_calls, weight_digest

weight_digest.install_packing_digest()

_TAPS = "_embedded_capture_taps"  # the worker's hooks between capture start and take


class EmbeddedWorkerExtension:
    """Mixed into vLLM's worker; ``self`` is the worker. Methods only: vLLM refuses an extension
    attribute its worker class already has."""

    def embedded_weight_digest(self) -> dict:
        """{parameter name: dtype, shape, sha} of the weights this worker's model holds now."""
        return weight_digest.model_report(self.model_runner.model)

    def embedded_operator_calls(self) -> dict:
        """The log-prob operator calls counted in this worker's process (operator_calls.py), engine side."""
        return operator_calls.snapshot(operator_calls.ROLLOUT)

    def embedded_capture_start(self) -> None:
        """Hooks on the worker's model until ``embedded_capture_take``; the next forward is kept."""
        previous = getattr(self, _TAPS, None)
        if previous is not None:
            previous.close()
        setattr(self, _TAPS, capture.VllmTaps(self.model_runner.model))
        operator_calls.capturing(True)  # the capture's prefill is not the rollout's: counted apart

    def embedded_capture_take(self, response_cols: str, operator: str = "", targets: str = "null", temperature: str = "1.0") -> dict:
        """Hooks off; the kept boundaries and the LM-head logits at ``response_cols`` (a JSON list of
        positions), encoded; with ``operator`` (the registry operator this engine's sampler ran) its
        selected log-probs of ``targets`` (JSON list) at ``temperature`` too. Strings: the server's
        /collective_rpc passes JSON. No capture started: {"problem": ...}."""
        taps = getattr(self, _TAPS, None)
        setattr(self, _TAPS, None)
        operator_calls.capturing(False)
        if taps is None:
            return {"problem": "no capture was started on this worker"}
        return capture.encode_tensors(taps.take(json.loads(response_cols), operator, json.loads(targets), float(temperature)))
