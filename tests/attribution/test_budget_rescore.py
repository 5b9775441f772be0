"""The drift budget's re-score against real runs: a re-score under a lever equals a run made with it.

The budget never launches a run per lever: it re-scores a rung's own sampled tokens under each
lever setting (harness.embedded.lever_score). Here, on one seed, a real run with one lever on
(--embedded-levers) is set beside the re-score of the native run's tokens under that lever, at
rollout 0 (sampled at the initial weights, before the lever can change training): a trainer-side
lever leaves the engine as it was, so both runs sampled the same tokens, and the re-score must give
the real run's recorded log-probs on both sides, bit for bit, and so its logged abs-diff. The re-score
at the run's own configuration reproduces its record on every captured rollout too (the replay check).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.experiment.budget_scores import scores, seed_scores
from harness.judge.budget import NATIVE
from harness.records.metric_names import ABS_DIFF
from harness.report.allure_attach import attach_text, label_experiment

pytestmark = pytest.mark.attribution

# (rung, lever): a build-time trainer lever on the bf16 rung, a per-call kernel lever on the fp8 rung,
# the MoE layer through vLLM's MoE ops on the MoE rung (fp8 and filters: the rollout's own contract)
CHECKED = [("near-aligned", "qk-norm"), ("fp8-rollout", "fp8-weights"), ("fp8-plus-filters-moe", "mlp")]


def _rollout_zero(run):
    import torch

    dump = torch.load(run.path / "dumps" / "rollout_0.pt", map_location="cpu", weights_only=False)
    return {int(s["index"]): ([int(t) for t in s["tokens"]], s["rollout_log_probs"]) for s in dump["samples"]}


@pytest.mark.parametrize(("rung", "lever"), CHECKED)
def test_a_rescore_under_a_lever_equals_a_real_run_made_with_it(get_run, knobs, rung, lever):
    switches = knobs.levers.levers[lever].switches
    native = get_run("p1", rung, "colocate", **{"num-rollout": 1})
    real = get_run("p1", rung, "colocate", **{"num-rollout": 1, "embedded-levers": ",".join(switches)})
    label_experiment("p1", rung, f"re-score vs a real run with lever {lever}", "colocate", "embedded", real.id)
    assert _rollout_zero(native).keys() == _rollout_zero(real).keys()
    assert all(_rollout_zero(native)[i][0] == tokens for i, (tokens, _) in _rollout_zero(real).items()), "a trainer lever changed the tokens"
    result = scores([native], knobs.levers, initial=True, setting_list=[{"key": "lever", "switches": switches, "replay": False}])
    real_trainer = [np.asarray(t, dtype=np.float32) for t in result["job"]["recorded_trainer"]]
    rescored = result["settings"]["lever"]
    # the real run's recorded log-probs, sample by sample in the native run's order
    import torch

    train = torch.load(real.path / "dumps" / "train_0_0.pt", map_location="cpu", weights_only=False)
    by_index = {int(s["index"]): (s["log_probs"], s["rollout_log_probs"]) for s in train["samples"]}
    order = [int(s["index"]) for s in torch.load(native.path / "dumps" / "rollout_0.pt", weights_only=False)["samples"]]
    unequal_trainer = sum(int(np.sum(np.float32(rescored["trainer"][k]) != np.float32(by_index[i][0]))) for k, i in enumerate(order))
    unequal_rollout = sum(int(np.sum(np.float32(rescored["rollout"][k]) != np.float32(by_index[i][1]))) for k, i in enumerate(order))
    tokens = sum(len(t) for t in real_trainer)
    gaps = [np.abs(np.float64(t) - np.float64(r)).mean() for t, r in zip(rescored["trainer"], rescored["rollout"])]
    logged = dict(real.series(ABS_DIFF))[0]
    attach_text(
        json.dumps(
            {
                "tokens": tokens,
                "unequal_trainer": unequal_trainer,
                "unequal_rollout": unequal_rollout,
                "rescored_abs_diff": float(np.mean(gaps)),
                "logged_abs_diff": logged,
            },
            indent=1,
        ),
        "re-score vs real run",
    )
    assert unequal_trainer == 0 and unequal_rollout == 0, f"{unequal_trainer} trainer and {unequal_rollout} rollout tokens of {tokens} differ"
    assert float(np.mean(gaps)) == pytest.approx(logged, rel=1e-6), "the re-scored abs-diff is the real run's logged one"


@pytest.mark.parametrize("rung", ["near-aligned", "fp8-plus-filters"])
def test_the_native_rescore_reproduces_every_captured_rollout_of_the_run(get_run, knobs, rung):
    """At the run's own configuration the re-score gives what the run recorded, on both sides, at
    every rollout whose weights it kept: the rollout's prefill equals its decode here."""
    run = get_run("p1", rung, "colocate", **{"num-rollout": 3})
    (seed,) = seed_scores([run], knobs.levers)
    assert seed.replay["rollout_unequal_tokens"] == 0 and seed.replay["trainer_unequal_tokens"] == 0, seed.replay
    assert seed.gaps[NATIVE].mean() > 0
