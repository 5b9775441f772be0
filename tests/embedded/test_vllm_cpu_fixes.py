"""harness.embedded.vllm_cpu_fixes against vLLM's own code: a fix may change how vLLM runs, never
what it computes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# vLLM's compiled rank count and the eager one, on log-probs with ties, -inf (masked entries) and
# a single row (the batch size vLLM marks unbacked), in a child process: the compiled side starts
# inductor, whose worker pools must not live in the pytest process (it forks trainers).
_COMPARE = textwrap.dedent(
    """
    import torch
    from vllm.v1.sample.ops.logprobs import batched_count_greater_than
    from harness.embedded.vllm_cpu_fixes import count_at_least

    g = torch.Generator().manual_seed(0)
    for rows in (1, 7, 96):
        x = torch.randn(rows, 512, generator=g).log_softmax(-1)
        x[:, ::5] = x[:, :1]                      # ties with the first entry
        x[:, 3::11] = float("-inf")               # masked entries
        chosen = torch.randint(0, 512, (rows, 1), generator=g)
        values = x.gather(-1, chosen)
        compiled, eager = batched_count_greater_than(x, values), count_at_least(x, values)
        assert compiled.dtype == eager.dtype and torch.equal(compiled, eager), (rows, compiled, eager)

    from harness.embedded import vllm_cpu_fixes
    from vllm.v1.sample import sampler

    vllm_cpu_fixes.install_eager_rank_count()
    assert sampler.batched_count_greater_than is count_at_least, "the sampler still calls the compiled count"
    print("equal")
    """
)


def test_eager_rank_count_is_vllms_compiled_count_and_the_sampler_calls_it():
    done = subprocess.run([sys.executable, "-c", _COMPARE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("equal"), done.stderr[-2000:]
