"""The weight-digest method of every vLLM worker (vLLM's ``worker_extension_cls``).

vLLM imports this module by name (``weight_digest.WORKER_EXTENSION``) in whichever process builds a
worker - the trainer's own, the engine-core child of a TP=2 trainer, the non-colocate server's -
and mixes ``WeightDigestExtension`` into its worker class, so ``collective_rpc("embedded_weight_digest")``
reaches it there. Importing it installs the packing digest (weight_digest.install_packing_digest)
in that process: vLLM imports the extension before it loads the model, whose CPU linear layers may
pack their weights at load. It is imported by vLLM only, after vLLM itself: never at interpreter
start (see engine_site/sitecustomize.py for why that matters).
"""

from __future__ import annotations

from harness.embedded import weight_digest

weight_digest.install_packing_digest()


class WeightDigestExtension:
    """Mixed into vLLM's worker; ``self`` is the worker."""

    def embedded_weight_digest(self) -> dict:
        """{parameter name: dtype, shape, sha} of the weights this worker's model holds now."""
        return weight_digest.model_report(self.model_runner.model)
