"""The links of knobs/candidate.yaml and knobs/readiness.yaml to the rest of knobs/.

Both files are optional (a knobs directory without them loads as before); harness.spec.load parses a
present file once into its typed model (harness.spec.candidate_file, harness.spec.readiness_file)
and hands it here with the rest of the spec: its names are checked against the files they point
into, one line per problem naming file and key.
"""

from __future__ import annotations

from harness.spec.candidate_file import CandidateFile
from harness.spec.errors import SpecError
from harness.spec.readiness_file import ReadinessFile


def check_candidate(candidate: CandidateFile, where: str, knobs) -> None:
    problems = []
    if knobs.levers is not None and candidate.boundary not in knobs.levers.operator_levers():
        problems.append(f"{where}: boundary: expected an operator lever of levers.yaml, got {candidate.boundary!r}")
    if candidate.flag not in knobs.ab.operator_path_flags.flags:
        problems.append(f"{where}: flag: expected one of ab.yaml operator_path_flags, got {candidate.flag!r}")
    runs_at = [(f"pairs.{name}", pair.rung, pair.stage) for name, pair in candidate.pairs.items()]
    runs_at.append(("negative_control", candidate.negative_control.rung, candidate.negative_control.stage))
    for key, rung, stage in runs_at:
        if rung not in knobs.rungs or stage not in knobs.rungs[rung].stages:
            problems.append(f"{where}: {key}: expected a rung of ladder/ that runs at {stage}, got {rung!r}")
    planted = set(knobs.ab.planted_fault_flags.flags) if knobs.ab.planted_fault_flags else set()
    outside = sorted(set(candidate.negative_control.set) - planted)
    if outside:
        problems.append(f"{where}: negative_control.set.{outside[0]}: expected a flag of ab.yaml planted_fault_flags ({', '.join(sorted(planted))})")
    expectations = [(f"pairs.{name}.expect.{backend}", e) for name, pair in candidate.pairs.items() for backend, e in pair.expect.items()]
    expectations += [(f"negative_control.expect.{backend}", e) for backend, e in candidate.negative_control.expect.items()]
    reports = [(f"{key}.report", e.report) for key, e in expectations]
    reports.append(("mixed_paths.report", candidate.mixed_paths.report))
    problems += _unknown_reports(where, reports, knobs)
    if "reported" in candidate.mixed_paths.expect.values() and candidate.mixed_paths.report is None:
        problems.append(f"{where}: mixed_paths.report: expected a report of reports.yaml where an expect is reported")
    if problems:
        raise SpecError(problems)


def _unknown_reports(where: str, reports: list[tuple[str, str | None]], knobs) -> list[str]:
    """Each named report must be one of knobs/reports.yaml's."""
    return [
        f"{where}: {key}: expected a report of reports.yaml ({', '.join(sorted(knobs.reports))}), got {name!r}"
        for key, name in reports
        if name is not None and name not in knobs.reports
    ]


def check_readiness(readiness: ReadinessFile, where: str, knobs) -> None:
    problems = []
    if readiness.stage not in knobs.stages:
        problems.append(f"{where}: stage: expected a stage of stages.yaml, got {readiness.stage!r}")
    for index, criterion in enumerate(readiness.criteria):
        for name in criterion.thresholds:
            if name not in knobs.thresholds:
                problems.append(f"{where}: criteria[{index}].thresholds: expected a threshold of thresholds.yaml, got {name!r}")
    problems += _unknown_reports(where, [(f"criteria[{i}].report", c.report) for i, c in enumerate(readiness.criteria)], knobs)
    if problems:
        raise SpecError(problems)
