"""The experiment without its test runner: the runs a selection needs (launched or found, backend by
backend), the evidence each judgement needs gathered from them, and the judged record.

    harness.experiment.runs      RunSource: a resolved spec -> its loaded run (launch, reuse or find)
    harness.experiment.evidence  the ladder's evidence gathered for the pure judge (harness.judge.ladder)
    harness.experiment.session   the main job's selection judged on recorded runs -> experiment record
    harness.experiment.command   `python -m harness judge --runs-dir DIR`

pytest (fixtures/) is one front end of it; the command line and tools/ are others.
"""
