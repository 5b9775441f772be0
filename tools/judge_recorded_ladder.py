"""Judge a stage's ladder on recorded runs, without launching anything or running pytest.

    python tools/judge_recorded_ladder.py RUNS_DIR [--stage p1] [--mode colocate] [--backend embedded]

Each rung's run is found in RUNS_DIR by its resolved-spec hash (fixtures.runs.find_recorded_run:
the spec resolved for --backend, matched on its flags), judged by harness.judge.ladder with the
stage's Holm family, and printed with its expectation findings. Framework probes are run on the
dumps when the run has them. Exit status 1 when a rung's expectation is not met or a run is missing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fixtures.runs import find_recorded_run  # noqa: E402
from harness.attribution.boundaries import boundary_status  # noqa: E402
from harness.attribution.probes import cached_framework_messages, contract_check  # noqa: E402
from harness.judge.ladder import expectation_findings, family_levels, judge_rung  # noqa: E402
from harness.records.rundir import RunDir  # noqa: E402
from harness.spec import load_knobs, resolve  # noqa: E402


def _status_and_verdict(verdict) -> tuple[str, str]:
    return verdict.status, verdict.verdict


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs_dir", type=Path)
    parser.add_argument("--stage", default="p1")
    parser.add_argument("--mode", default="colocate")
    parser.add_argument("--backend", default="embedded")
    parser.add_argument("--knobs", default="knobs")
    args = parser.parse_args()
    knobs = load_knobs(args.knobs)
    loaded, missing = {}, []

    def fetch(rung_id, **overrides):
        spec = resolve(knobs, args.stage, rung_id, args.mode, args.backend, overrides)
        if spec.run_id not in loaded:
            path, how = find_recorded_run(args.runs_dir, spec)
            if path is None:
                missing.append(f"{rung_id} {overrides or ''}: {how}")
                raise LookupError(how)
            loaded[spec.run_id] = RunDir(path).load()
        return loaded[spec.run_id]

    framework_probe_messages = cached_framework_messages()  # parents serve several rungs

    def framework_checks(run):
        return framework_probe_messages(run)[0]

    def framework_not_checked(run):
        return framework_probe_messages(run)[1]

    levels = family_levels(knobs, args.stage, args.backend, fetch)
    failed = False
    for rung_id, rung in sorted(knobs.rungs.items()):
        if args.stage not in rung.stages or (rung.parent is not None and rung_id not in levels):
            continue
        try:
            judgement = judge_rung(
                rung,
                knobs,
                fetch,
                framework_checks,
                levels.get(rung_id),
                contract_check=lambda run: _status_and_verdict(contract_check(run, knobs)),
                boundary_check=lambda run: boundary_status(run, knobs),
                framework_not_checked=framework_not_checked,
                replicates=knobs.stages[args.stage].replicate_count(args.backend),
            )
            findings = judgement.problems + expectation_findings(rung, judgement, fetch(rung_id), knobs)
        except LookupError as err:
            findings = [f"not judged: {err}"]
            judgement = None
        failed |= bool(findings)
        print(("PASS " if not findings else "FAIL ") + (judgement.summary() if judgement else rung_id))
        if judgement is not None and "decision" in judgement.evidence:
            d = judgement.evidence["decision"]
            print(
                f"     family {d['family_size']} ({', '.join(d['family'])}), Holm rank {d['holm_rank']}, "
                f"adjusted alpha {d['adjusted_alpha']:.4g}, p {d['p_value']:.3g}"
            )
        for line in findings:
            print("     - " + line)
    return 1 if failed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
