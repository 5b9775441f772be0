"""Details of VIME's log that change what a run is said to be: a command quoting error names is no
error, two ranks that disagree are said, an argument name too long for dots is still an argument,
the argument print read as flags, and the evidence lines (RL-Kernel, provider, memory, KV cache)
read with the rollout they belong to."""

from __future__ import annotations

from harness.records.failures import match_signature
from harness.records.log_evidence import per_rollout_max, scan_lines
from harness.records.logparse import parse_log_lines
from harness.records.printed_arguments import flags_from_arguments, printed_value

TRAINER = "(MegatronTrainRayActor pid=11) [2026-11-20 10:00:01] model.py:540 - "


def test_a_command_that_quotes_error_names_is_not_a_failure_and_the_error_itself_is():
    echoed = 'rg -n "Using RL-Kernel linear_logp op|perf [0-9]+:|CUDA out of memory|EngineDead|ConnectionRefusedError" "$LOG"'
    assert match_signature(echoed) is None
    assert match_signature("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB") == "cuda-oom"
    assert match_signature("RuntimeError: can't continue, CUDA out of memory; don't retry") == "cuda-oom"  # apostrophes quote nothing
    result = parse_log_lines([echoed, f"{TRAINER}step 0: {{'train/loss': 0.1}}"])
    assert not result.failures and len(result.records) == 1


def test_two_ranks_logging_different_values_for_one_step_are_said_once():
    lines = [
        f"{TRAINER}step 0: {{'train/loss': 0.5}}",
        "(MegatronTrainRayActor pid=12) [2026-11-20 10:00:01] model.py:540 - step 0: {'train/loss': 0.7}",
        "(MegatronTrainRayActor pid=12) [2026-11-20 10:00:02] model.py:540 - step 1: {'train/loss': 0.9}",
        f"{TRAINER}step 1: {{'train/loss': 0.8}}",
    ]
    result = parse_log_lines(lines)
    (warning,) = [w for w in result.warnings if "two ranks disagree" in w]
    assert warning.startswith("line 2: step 0 logged by MegatronTrainRayActor pid=12 with train/loss = 0.7") and "(line 1) = 0.5" in warning
    same = parse_log_lines([f"{TRAINER}step 0: {{'train/loss': 0.5}}", "(MegatronTrainRayActor pid=12) [t] m.py:1 - step 0: {'train/loss': 0.5}"])
    assert not [w for w in same.warnings if "disagree" in w]


def test_the_argument_print_with_a_name_too_long_for_dots_is_read_whole():
    long_name = "vllm_" + "x" * 48  # Megatron pads with 48 - len(name) dots: none here
    lines = [
        "------------------------ arguments ------------------------",
        f"  bf16 {'.' * 44} True",
        f"  {long_name}  7",
        f"  rl_kernel_ops {'.' * 35} ('linear_logp',)",
        f"  fp16 {'.' * 44} False",
        "-------------------- end of arguments ---------------------",
    ]
    arguments = parse_log_lines(lines).arguments
    assert arguments[long_name] == "7" and arguments["rl_kernel_ops"] == "('linear_logp',)"
    flags = flags_from_arguments(arguments)
    assert flags == {"bf16": True, long_name.replace("_", "-"): 7, "rl-kernel-ops": ["linear_logp"]}
    assert printed_value("None") is None and printed_value("[1, 1, 0]") == [1, 1, 0] and printed_value("1e-06") == 1e-06


def test_the_evidence_lines_are_read_with_the_rollout_they_belong_to():
    lines = [
        f"{TRAINER}Using RL-Kernel linear_logp op: FusedLinearLogpSM90Op",
        "(VLLMEngine pid=5) INFO 11-20 10:00:31 [loggers.py:257] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
        "Avg generation throughput: 500.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 41.5%, Prefix cache hit rate: 0.0%",
        f"{TRAINER}[Rank 0] Memory-Usage after train: {{'gpu': '0', 'total_GB': 184.0, 'used_GB': 60.5, 'reserved_GB': 58.0}}",
        f"{TRAINER}perf 0: {{'perf/train_time': 80.0, 'perf/step_time': 140.0}}",
        f"{TRAINER}[Rank 0] Memory-Usage after train: {{'gpu': '0', 'total_GB': 184.0, 'used_GB': 61.5, 'reserved_GB': 59.0}}",
        f"{TRAINER}[Rank 0] Memory-Usage after offload: {{'gpu': '0', 'total_GB': 184.0, 'used_GB': 12.0, 'reserved_GB': 3.0}}",
        f"{TRAINER}Falling back to vime logprob path because RL-Kernel linear_logp is unavailable: entropy is requested",
        "(MegatronTrainRayActor pid=11) Selected-logprob provider active: backend_id=rlk.logp contract_id=rlk.v1 provenance={}",
        'rl_kernel.execution_decision {"operator": "linear_logp", "decision": "optimized"}',
        "rl_kernel.execution_decision {not json}",
    ]
    evidence = scan_lines(lines)
    assert [e.fields["implementation"] for e in evidence.ops_loaded] == ["FusedLinearLogpSM90Op"]
    assert evidence.fallbacks[0].fields == {"op": "linear_logp", "reason": "entropy is requested"} and evidence.fallbacks[0].line == 7
    assert evidence.provider_active[0].fields == {"backend_id": "rlk.logp", "contract_id": "rlk.v1"}
    assert evidence.decisions == [{"operator": "linear_logp", "decision": "optimized", "_line": 9}]
    assert evidence.problems and "line 10" in evidence.problems[0]
    assert per_rollout_max(evidence.memory, "used_GB") == [(0, 60.5), (1, 61.5)]
    assert per_rollout_max(evidence.kv_cache, "percent") == [(0, 41.5)]


def test_a_rollout_precision_is_read_from_the_checkpoint_not_its_name(tmp_path):
    from harness.records.environment import checkpoint_record
    from harness.report.flags import describe_precision

    named_fp8 = tmp_path / "Qwen3-30B-A3B-FP8"
    named_fp8.mkdir()
    (named_fp8 / "config.json").write_text('{"torch_dtype": "bfloat16"}')
    flags = {"hf-checkpoint": str(named_fp8)}
    # VIME trains in bf16 unless --fp16; the checkpoint says bf16 whatever its name says.
    assert describe_precision(flags, checkpoint_record(str(named_fp8)), vime=True) == "BF16 train + BF16 rollout"
    unreadable = checkpoint_record("/nowhere/Qwen3-30B-A3B-FP8")
    assert "not readable" in unreadable["note"]
    assert (
        describe_precision({"hf-checkpoint": unreadable["path"]}, unreadable, vime=True) == "BF16 train + FP8 rollout"
    )  # the name, as the last resort
