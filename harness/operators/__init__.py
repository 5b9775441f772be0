"""Selected-token log-prob operators, their registry and the operator bench.

from harness.operators import registry
op = registry.get("fused-linear-logprob")
logp = op.selected_logprobs(hidden, weight, targets, temperature=1.0, tp_size=1)  # [T] float32
"""

from harness.operators import registry
from harness.operators.contract import Contract, OperandError, Operator

__all__ = ["Contract", "OperandError", "Operator", "registry"]
