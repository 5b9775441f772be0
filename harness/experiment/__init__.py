"""The experiment without its test runner: the runs a selection needs (launched or found, backend by
backend), the evidence each judgement needs gathered from them, every check decided once, and the
judged record.

    harness.experiment.runs       RunSource: a resolved spec -> its loaded run (launch, reuse or find)
    harness.experiment.provision  Provision: a RunSource whose planned runs are made in the background
    harness.experiment.plan       the runs a selection will ask for, known before any check runs
    harness.experiment.evidence   the evidence gathered for the pure judge (harness.judge), files included
    harness.experiment.session    Session: each check of the main job decided and recorded, once
    harness.experiment.main_job   the main job's checks in pytest's order; the command line's way through them
    harness.experiment.command    `python -m harness baseline`, `python -m harness judge --runs-dir DIR`

pytest (fixtures/) is one front end of it; the command line is the other.
"""
