"""Judging a run: numbers in, a verdict out. Never imports harness.attribution.

stats       block-bootstrap intervals, trends, A/A equivalence on per-step series
verdict     Verdict, the warm-up rule, the metric names the judge reads
acceptance  the seed's acceptance criteria, one named check each (knobs/acceptance.yaml)
ladder      one rung against its parent: the delta and the drift class decided from evidence
ab          the P3 A/B gate: the contract, then the seed's five questions
decisions   RL-Align's execution decision records read from a run's log
"""
