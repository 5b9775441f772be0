"""The probes' decision logic on hand-built runs: each built fault stops at its probe with its class.

The same faults on real embedded runs are in test_probes_on_runs.py; these check the checker with
inputs whose cause is known by construction (test the tester).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch
from attribution_builders import build_run

from harness import REPO_ROOT
from harness.attribution.probes import framework_checks, run_probes
from harness.records.rundir import RunDir

pytestmark = pytest.mark.attribution

# Built runs carry probe bundles and logged metrics but no capture: what survives the framework
# and contract probes has no measured numerical evidence (probes 3, 4, 7 recompute each side's LM
# head from declarations: "not measured"), so it is undecided and needs the boundary table.
CASES = {
    # drift within the fp32 floor on every logged step: nothing to attribute
    "aligned-fp32": (dict(), "none", None),
    "bf16-rollout": (dict(rollout_dtype=torch.bfloat16), "undecided", None),
    "top-p-processed": (dict(top_p=0.8), "semantic", 6),
    "top-p-and-bf16": (dict(top_p=0.8, rollout_dtype=torch.bfloat16), "semantic", 6),
    "trainer-ignores-temperature": (dict(temperature=0.7, trainer_temperature=1.0), "semantic", 6),
    "token-shift": (dict(fault="token-shift"), "framework", 1),
    "mask-off-by-one": (dict(fault="mask-off-by-one"), "framework", 1),
    "stale-weights": (dict(fault="stale-weights", rollout_dtype=torch.bfloat16), "framework", 2),
    # fp32 declared on both sides, yet the rollout's hidden states diverge: no capture, so no class
    "fp32-upstream-divergence": (dict(hidden_noise=1e-2), "undecided", None),
    "bf16-upstream-divergence": (dict(hidden_noise=1e-2, rollout_dtype=torch.bfloat16), "undecided", None),
}
UPSTREAM = ("fp32-upstream-divergence", "bf16-upstream-divergence")
DECLARED = (3, 4, 7)  # probes computed from declarations: never a pass


@pytest.mark.parametrize("case", list(CASES))
def test_built_fault_decides_its_class(tmp_path, case, knobs):
    kwargs, expected_class, expected_probe = CASES[case]
    report = run_probes(RunDir(build_run(tmp_path, **kwargs)).load(), knobs)
    statuses = {p.number: p.status for p in report.probes}
    assert (report.drift_class, report.decided_by) == (expected_class, expected_probe), (statuses, report.reason)
    # Every probe is measured or says it is not; 3, 4, 7 are never a pass (computed from declarations),
    # nor is probe 5 on a TP=1 run (no merge ran: not measured, blocking no class).
    assert all(statuses[n] == "not measured" for n in (*DECLARED, 5)), statuses
    assert report.probes[4].evidence["not_applicable"] and report.complete is False
    if expected_class == "undecided" and case in UPSTREAM:
        # T=1, no filters, no capture: the rollout's temperature fit on the trainer's hidden states carries
        # the upstream divergence, but no temperature in its interval explains half the drift the two
        # sides show (the band's drift term), so probe 6 passes on measured fits and the numerical
        # question waits for the boundary table this built run has none of.
        assert statuses[6] == "pass", report.probes[5].verdict
        assert "observed drift" in report.probes[5].verdict, report.probes[5].verdict
        assert any("boundary table" in need for need in report.needs), report.needs
    elif expected_class == "undecided":
        assert any("boundary table" in need for need in report.needs), report.needs
    elif expected_probe is not None:
        assert statuses[expected_probe] == "fail"
        assert report.probes[expected_probe - 1].evidence  # the deciding verdict carries its evidence
    else:
        assert {statuses[n] for n in (1, 2, 6)} == {"pass"} and report.decided_by_evidence == "logged abs-diff"


def test_a_declared_boundary_is_evidence_not_a_verdict(tmp_path, knobs):
    """Probe 3 still shows where the declared bf16 LM head would put the drift, as evidence only."""
    report = run_probes(RunDir(build_run(tmp_path, rollout_dtype=torch.bfloat16)).load(), knobs)
    probe3 = report.probes[2]
    assert probe3.status == "not measured" and probe3.boundary is None
    assert probe3.evidence["would_have_said"]["boundary"] == "LM-head GEMM / bf16 logits of the rollout path"
    assert all(report.probes[n - 1].status == "pass" for n in (1, 2, 6))
    assert report.drift_class == "undecided" and report.boundary is None


def test_framework_checks_are_probes_one_and_two(tmp_path):
    checks = framework_checks(RunDir(build_run(tmp_path, fault="token-shift")).load())
    assert [c.number for c in checks] == [1, 2]
    assert checks[0].status == "fail" and "tokens" in checks[0].verdict


def test_vime_dumps_without_bundles_skip_what_they_cannot_show(tmp_path, knobs):
    report = run_probes(RunDir(build_run(tmp_path, vime_format=True)).load(), knobs)
    statuses = {p.number: p.status for p in report.probes}
    assert statuses[1] == "pass"  # tokens, masks and rollout log-probs are in VIME's own dumps
    assert all(statuses[n] == "not checked" for n in (2, 3, 4, 6, 7))
    # a TP=1 run ran no vocab-parallel merge: probe 5 is not applicable, with or without bundles
    assert statuses[5] == "not measured" and report.probes[4].evidence["not_applicable"], report.probes[4].verdict
    assert report.probes[4].basis.kind == "none" and "TP=1" in report.probes[4].verdict
    assert report.complete is False
    # Nothing failed, but a probe that could not run is no pass: the class names what it needs.
    assert report.drift_class == "undecided" and report.decided_by is None
    assert report.label.startswith("undecided: needs probe 2 (model state), probe 6 ("), report.label
    assert any("probe_bundle_missing" in w for w in report.warnings)


def test_cli_json_has_class_and_decided_by(tmp_path):
    path = build_run(tmp_path, fault="stale-weights")
    out = subprocess.run(
        [sys.executable, "-m", "harness", "attribute", str(path), "--json"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout)
    assert (data["class"], data["decided_by"]) == ("framework", 2)
    assert [p["number"] for p in data["probes"]] == list(range(1, 8))
    assert data["audit"]["per_step"]


def test_cli_text_and_bad_run_dir(tmp_path):
    path = build_run(tmp_path, top_p=0.8)
    out = subprocess.run([sys.executable, "-m", "harness", "attribute", str(path)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "class: semantic (decided by probe 6 (" in out.stdout, out.stdout[-3000:]
    bad = subprocess.run(
        [sys.executable, "-m", "harness", "attribute", str(tmp_path / "nope")], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no such run directory" in bad.stderr


def test_probe_bundle_exports_to_the_operator_bench(tmp_path):
    from harness.attribution.probe_bundle import export_for_bench, read_bundle
    from harness.operators import registry
    from harness.operators.bundles import load_bundle

    bundle = read_bundle(build_run(tmp_path, steps=1) / "dumps" / "probe_0.pt")
    bench = load_bundle(export_for_bench(bundle, tmp_path / "bundle.safetensors"))
    active = bundle.active
    assert bench.hidden.shape == (int(active.sum()), bundle.hidden.shape[1])
    # The bench recomputes the trainer's fp32 log-probs from the exported operands.
    recomputed = registry.get("fp64-reference").selected_logprobs(bench.hidden, bench.weight, bench.targets)
    assert torch.allclose(recomputed.double(), bundle.trainer_log_probs[active], atol=1e-5)


def test_malformed_probe_bundle_is_named_and_skips_only_bundle_probes(tmp_path, knobs):
    path = build_run(tmp_path, steps=1, fault="token-shift")
    torch.save({"rollout_id": 0, "samples": [{"index": 0}]}, path / "dumps" / "probe_0.pt")
    report = run_probes(RunDir(path).load(), knobs)
    assert any("probe_0.pt" in w and "malformed_probe_bundle" in w for w in report.warnings)
    assert (report.drift_class, report.decided_by) == ("framework", 1)  # the dumps still show the shift
    assert {p.number: p.status for p in report.probes}[3] == "not measured"


def _train_metadata(path, steps, make):
    from attribution_builders import rewrite

    for step in range(steps):

        def change(data, step=step):
            # On top of what the builder recorded (the weight digest, probe 2's evidence), not instead of it.
            old = data["rollout_data"].get("consistency_metadata") or [{} for _ in data["rollout_data"]["tokens"]]
            data["rollout_data"]["consistency_metadata"] = [{**old[i], **make(i, step)} for i, _ in enumerate(data["rollout_data"]["tokens"])]

        rewrite(path / "dumps" / f"train_{step}_0.pt", change)


def test_recorded_sampling_parameters_that_differ_are_semantic(tmp_path, knobs):
    path = build_run(tmp_path, steps=1, temperature=0.7)
    _train_metadata(path, 1, lambda i, step: {"tokenizer": "tok-A", "sampling": {"temperature": 1.0}})
    report = run_probes(RunDir(path).load(), knobs)
    assert (report.drift_class, report.decided_by) == ("semantic", 6)
    assert "consistency_metadata.sampling.temperature" in report.probes[5].verdict


def test_side_specific_metadata_is_reported_not_compared(tmp_path, knobs):
    # RL-Align-style records: quantisation, provenance and batch layout legitimately differ per side.
    # Two steps: probe 6's temperature fit bootstraps over bundles (these built ones are one unit each).
    path = build_run(tmp_path, steps=2)

    def rollout_side(data):
        for sample in data["samples"]:
            sample["consistency_metadata"].update(quantization={"fingerprint": "fp8-block"}, fingerprint="r", batch_layout={"fingerprint": "engine"})

    from attribution_builders import rewrite

    for step in range(2):
        rewrite(path / "dumps" / f"rollout_{step}.pt", rollout_side)
    _train_metadata(
        path,
        2,
        lambda i, step: {
            "tokenizer": "tok-A",
            "sampling": {"temperature": 1.0},
            "quantization": {"fingerprint": "bf16"},
            "fingerprint": "t",
            "batch_layout": {"fingerprint": f"mb0-{i}"},
        },
    )
    report = run_probes(RunDir(path).load(), knobs)
    assert (report.drift_class, report.decided_by) == ("none", None), [p.verdict for p in report.probes]
    assert report.probes[0].evidence["batch_layout_examples"]


def test_bundle_that_does_not_reproduce_its_trainer_is_not_used_to_localise(tmp_path, knobs):
    # An upstream divergence that a faithful bundle would localise, but the bundle's weight is one
    # AdamW step (1e-4 per element) away from the weight that produced its trainer log-probs.
    report = run_probes(RunDir(build_run(tmp_path, hidden_noise=1e-2, bundle_weight_step=1e-4)).load(), knobs)
    assert {p.number: p.status for p in report.probes}[3] == "not measured"
    assert report.probes[2].evidence["would_have_said"]["status"] == "not checked"
    assert any("bundle_inconsistent" in w for w in report.warnings)
    assert report.drift_class != "candidate-operator"


def test_an_unchecked_framework_probe_leaves_the_class_undecided(tmp_path, knobs):
    # A contract failure is semantic only once probes 1 and 2 passed; a framework failure is a
    # finding whatever else could not run.
    from harness.attribution.boundaries import boundary_table
    from harness.attribution.probes import NOT_CHECKED, decide

    report = run_probes(RunDir(build_run(tmp_path, top_p=0.8)).load(), knobs)
    table = boundary_table(tmp_path / "no-capture", 4.0)
    assert decide(report.probes, table).drift_class == "semantic"
    unchecked = [p.model_copy(update={"status": NOT_CHECKED}) if p.number == 2 else p for p in report.probes]
    decided = decide(unchecked, table)
    assert decided.drift_class == "undecided" and decided.needs == ["probe 2 (model state)"], decided
    failed = [p.model_copy(update={"status": "fail"}) if p.number == 1 else p for p in unchecked]
    assert decide(failed, table).drift_class == "framework"


def test_mixed_bundles_are_neither_pass_nor_fail():
    """A probe passes only when every bundle passes; a NaN figure is not comparable, never within."""
    from harness.attribution.probes import NOT_CHECKED, _numeric_verdict

    ok = {"file": "probe_0.pt", "localised": False, "evidence": {"mean": 1e-7}}
    hit = {"file": "probe_1.pt", "localised": True, "boundary": "b", "side": "rollout", "policy": "float32", "evidence": {"mean": 1e-3}}
    nan = {"file": "probe_2.pt", "localised": False, "evidence": {"mean": float("nan")}}
    assert _numeric_verdict(3, [ok, ok], "x").status == "pass"
    assert _numeric_verdict(3, [hit, hit], "x").status == "fail"
    assert _numeric_verdict(3, [ok, hit], "x").status == NOT_CHECKED
    assert _numeric_verdict(3, [ok, nan], "x").status == NOT_CHECKED


def _contract_result(differs: bool, agrees: bool, observed: float, replayed: float, tokens: int = 40) -> dict:
    evidence = {
        "contract_differs": differs,
        "contract_agrees": agrees,
        "comparable": all(map(math.isfinite, (observed, replayed))),
        "observed_mean_abs_dlogp": observed,
        "replayed_mean_abs_dlogp": replayed,
        "removed_fraction": 1 - replayed / observed,
        "tokens": tokens,
        "trainer_follows": "raw T=1",
        "declared_rollout_contract": "processed T=1 top_p=0.95",
    }
    return {"file": "probe.pt", "evidence": evidence}


def test_probe_6_decides_from_the_pooled_replay_not_one_bundle():
    """The AVX2 failure: one 40-token bundle of 30 whose own replay removes < 50% made probe 6 pass.
    Now every bundle must show the trainer on another contract, and the replay's share is taken
    over all bundles' tokens; a bundle that disagrees leaves the probe not checked, never a pass."""
    from harness.attribution.probe_run import RunSettings
    from harness.attribution.probes import NOT_CHECKED, _contract_verdict

    flags = {"sampled_outside_flagged_set": 0}
    settings = RunSettings(top_p=0.95)
    # removed per bundle: 0.45 (below the threshold on its own), 0.9, 0.9; pooled 1 - 3.0e-3 / 12e-3 = 75%
    bundles = [_contract_result(True, False, 4e-3, 2.2e-3), _contract_result(True, False, 4e-3, 0.4e-3), _contract_result(True, False, 4e-3, 0.4e-3)]
    verdict = _contract_verdict(bundles, flags, settings, [], 0.95, 0.5)
    assert verdict.status == "fail" and verdict.evidence["pooled"]["removed_fraction"] == pytest.approx(0.75), verdict.verdict
    # the trainer on the declared contract in one bundle: neither semantic nor a pass
    mixed = _contract_verdict([*bundles[:2], _contract_result(False, True, 1e-3, 1e-3)], flags, settings, [], 0.95, 0.5)
    assert mixed.status == NOT_CHECKED, mixed.verdict
    # replaying removes less than half over all tokens: the contracts differ, but that is no pass
    small = _contract_result(True, False, 4e-3, 3e-3)
    assert _contract_verdict([small, small], flags, settings, [], 0.95, 0.5).status == NOT_CHECKED
    # a NaN in one bundle: not comparable, so never a pass
    same = _contract_result(False, True, 1e-3, 1e-3)
    assert _contract_verdict([same, _contract_result(False, True, float("nan"), 1e-3)], flags, settings, [], 0.95, 0.5).status == NOT_CHECKED
    assert _contract_verdict([same, same], flags, settings, [], 0.95, 0.5).status == "pass"


def test_cli_on_a_run_without_a_readable_dump_is_undecided_and_fails(tmp_path):
    path = build_run(tmp_path, steps=1)
    for dump in (path / "dumps").glob("*.pt"):
        dump.write_bytes(b"not a torch file")
    out = subprocess.run([sys.executable, "-m", "harness", "attribute", str(path)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 1 and out.stdout.startswith("class: undecided: no readable dump"), (out.stdout, out.stderr[-2000:])
    data = json.loads(
        subprocess.run(
            [sys.executable, "-m", "harness", "attribute", str(path), "--json"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
        ).stdout
    )
    assert data["label"] == "undecided: no readable dump" and any("unreadable_dump" in w for w in data["warnings"])


def test_contract_check_is_probe_6_alone(tmp_path, knobs):
    # The ladder's evidence on sampling rungs without a replay run: fail on a processed top-p
    # contract the trainer ignores; not checked (never pass) on VIME dumps with no probe bundle.
    from harness.attribution.probes import NOT_CHECKED, contract_check

    failed = contract_check(RunDir(build_run(tmp_path / "top-p", steps=1, top_p=0.8)).load(), knobs)
    assert (failed.number, failed.status) == (6, "fail"), failed.verdict
    unchecked = contract_check(RunDir(build_run(tmp_path / "vime", steps=1, vime_format=True)).load(), knobs)
    assert unchecked.status == NOT_CHECKED, unchecked.verdict
    # VIME dumps alone, top-p processed vs the trainer's raw log-probs: dlogp is one-sided below zero.
    one_sided = contract_check(RunDir(build_run(tmp_path / "vime-top-p", steps=1, top_p=0.8, vime_format=True)).load(), knobs)
    assert one_sided.status == "fail" and "one-sided" in one_sided.boundary, one_sided.verdict
    # ... and a bf16 rollout without filters gives both signs: not checked, never a pass.
    bf16 = contract_check(RunDir(build_run(tmp_path / "vime-bf16", steps=1, rollout_dtype=torch.bfloat16, vime_format=True)).load(), knobs)
    assert bf16.status == NOT_CHECKED and 0.05 < bf16_fraction(bf16) < 0.95, bf16.evidence


def bf16_fraction(verdict) -> float:
    return verdict.evidence["dump_filter_flags"]["dlogp_negative_fraction"]


def _replay_of(run_path, root, scale: float, **flags):
    """A built replay run of `run_path`'s spec (the replay switch on, plus `flags`), logging `scale` x
    the run's drift per step: what its trainer would log with the contract replayed."""
    import yaml

    from harness.records.metric_names import ABS_DIFF

    path = build_run(root, steps=4, top_p=0.8, log_metric=False)
    spec = yaml.safe_load((path / "spec.yaml").read_text())
    spec["flags"].update({"embedded-replay-processed-logprobs": True, **flags})
    (path / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    replay = RunDir(path)
    for step, value in RunDir(run_path).load().series(ABS_DIFF):
        replay.append_record({"kind": "step", "n": step, "metrics": {ABS_DIFF: value * scale}})
    replay.close()
    return path


def test_probe_6_says_replaying_only_with_a_replay_run(tmp_path, knobs):
    """Without a replay run probe 6 reports the recompute on the bundles' hidden states (with its token
    count) and says no replay ran; with the rung's replay run (harness attribute --replay-run) it reports,
    and judges by, the share of the logged abs-diff that run removed: never a share not computed."""
    from harness.attribution.probe_contract import ReplayRunProblem

    run_path = build_run(tmp_path / "top-p", steps=4, top_p=0.8)
    run = RunDir(run_path).load()
    alone = run_probes(run, knobs).probes[5]
    assert alone.status == "fail" and "replaying" not in alone.verdict, alone.verdict
    assert "recomputing the trainer's log-probs under it (fp64, on the bundles' hidden states, " in alone.verdict, alone.verdict
    assert "no replay run measured" in alone.verdict and alone.evidence["replay"]["measured"] is False
    replayed = run_probes(run, knobs, RunDir(_replay_of(run_path, tmp_path / "replay", 0.1)).load()).probes[5]
    assert replayed.status == "fail" and "replaying it in the trainer (run built-0, 2 steps after warmup) removes 90%" in replayed.verdict
    assert replayed.evidence["replay"]["removed_fraction"] == pytest.approx(0.9) and replayed.evidence["replay"]["measured"]
    # the recompute says ~100% here, the replay run removed 20%: the measured share decides (not semantic)
    weak = run_probes(run, knobs, RunDir(_replay_of(run_path, tmp_path / "weak", 0.8)).load()).probes[5]
    assert weak.status == "not checked" and "removes 20%" in weak.verdict, weak.verdict
    # a run of another spec is not this run's replay: one line, naming the key
    with pytest.raises(ReplayRunProblem, match="flags.seed"):
        run_probes(run, knobs, RunDir(_replay_of(run_path, tmp_path / "other", 0.1, seed=7)).load())
    cli = [sys.executable, "-m", "harness", "attribute", str(run_path), "--replay-run", str(run_path)]
    out = subprocess.run(cli, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0 and "embedded-replay-processed-logprobs" in out.stderr, out.stderr[-2000:]
    cli[-1] = str(tmp_path / "replay" / "built-0")
    data = json.loads(subprocess.run([*cli, "--json"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300).stdout)
    probe6 = data["probes"][5]
    assert probe6["evidence"]["replay"]["run"] == "built-0" and "replay run built-0" in probe6["basis"]["detail"]


def test_a_declared_basis_cannot_pass_or_fail():
    """The verdict model refuses a pass or a fail standing on declarations or on nothing."""
    from pydantic import ValidationError

    from harness.attribution.probes import Basis, ProbeVerdict

    for kind in ("declarations", "none"):
        for status in ("pass", "fail"):
            with pytest.raises(ValidationError, match="basis"):
                ProbeVerdict(number=4, name="x", status=status, verdict="x", basis=Basis(kind=kind, detail="declared dtypes"))
    assert ProbeVerdict(number=4, name="x", status="not measured", verdict="x", basis=Basis(kind="declarations", detail="d")).status
