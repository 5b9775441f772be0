"""Probe 6 on a rung with one candidate contract (T = 1, no top-k/top-p): each side's temperature is
measured (harness.attribution.probe_contract.temperature_check), so the probe can fail there.

Real tensors: a random LM head and hidden states, log-probs computed by torch at a known temperature,
the logits rounded to bf16 as an engine's LM head leaves them. The band comes from
knobs/thresholds.yaml (contract_temperature_max_drift); nothing here is tuned to it.
"""

from __future__ import annotations

import pytest
import torch

from harness.attribution.probe_bundle import ProbeBundle
from harness.attribution.probe_contract import _selected, fit_temperature, temperature_check, temperature_status
from harness.embedded.capture import FORMAT as FORMAT_CAPTURE

pytestmark = pytest.mark.attribution

VOCAB, HIDDEN, SAMPLES, TOKENS = 512, 64, 32, 20


def _engine(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    weight = (0.3 * torch.randn(VOCAB, HIDDEN, generator=gen)).bfloat16()
    hidden = [torch.randn(TOKENS, HIDDEN, generator=gen).bfloat16() for _ in range(SAMPLES)]
    # bf16 LM head (fp32 accumulate, bf16 output), as the engines' native heads round their logits
    logits = [(h.float() @ weight.float().T).bfloat16() for h in hidden]
    targets = [torch.multinomial(torch.softmax(z.float(), dim=1), 1, generator=gen).squeeze(1) for z in logits]
    return weight, hidden, logits, targets


def _recorded(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """What a side records: fp32 log-softmax of its own (bf16) logits over T, at the sampled token."""
    return torch.log_softmax(logits.float() / temperature, dim=1).gather(1, targets[:, None]).squeeze(1)


def _capture_dir(tmp_path, trainer_t: float, rollout_t: float, rollout_noise: float = 0.0):
    _, _, logits, targets = _engine()
    gen = torch.Generator().manual_seed(1)
    samples = []
    for index, (z, y) in enumerate(zip(logits, targets)):
        # rollout_noise: the rollout's own logits differ from the trainer's (its own bf16 forward)
        zr = (z.float() + rollout_noise * torch.randn(z.shape, generator=gen)).bfloat16()
        side = lambda own, t, y=y: {"logits": own, "targets": y, "recorded_logprob": _recorded(own, y, t).double()}  # noqa: E731
        samples.append({"index": index, "trainer": side(z, trainer_t), "rollout": side(zr, rollout_t)})
    torch.save({"format": FORMAT_CAPTURE, "policy": {}, "samples": samples, "unavailable": []}, tmp_path / "capture_2.pt")
    return tmp_path


def _limits(knobs) -> tuple[float, float]:
    return knobs.threshold("contract_temperature_max_drift"), knobs.threshold("bootstrap_confidence")


def test_the_tolerance_is_the_floor_of_the_effect_of_interest(knobs):
    # Defined, not fitted (knobs/thresholds.yaml's reason): the band is the temperature error whose
    # drift reaches rung_min_abs_delta, the smallest effect the ladder resolves.
    assert knobs.threshold("contract_temperature_max_drift") == knobs.threshold("rung_min_abs_delta")


def test_a_side_at_another_temperature_fails(tmp_path, knobs):
    """T = 1 declared, the rollout's log-probs produced at T = 0.9: semantic, the rollout named."""
    check = temperature_check([], _capture_dir(tmp_path, 1.0, 0.9), 1.0, *_limits(knobs))
    status, text = temperature_status(check)
    assert status == "fail" and "rollout's log-probs follow another temperature" in text, text
    assert check["sides"]["rollout"]["t_hat"] == pytest.approx(0.9, abs=1e-3)
    assert check["sides"]["trainer"]["t_hat"] == pytest.approx(1.0, abs=1e-6)


def test_both_sides_at_the_declared_temperature_with_bf16_noise_pass(tmp_path, knobs):
    """T = 1 on both sides; the rollout's logits differ from the trainer's by bf16-sized noise (one
    bf16 ulp at |logit| ~ 1-4 is 4e-3-1.6e-2): each side's fit uses its own logits, so it passes, with
    the intervals far inside the band."""
    check = temperature_check([], _capture_dir(tmp_path, 1.0, 1.0, rollout_noise=1e-2), 1.0, *_limits(knobs))
    status, text = temperature_status(check)
    assert status == "pass", text
    for side in ("trainer", "rollout"):
        fit = check["sides"][side]
        assert fit["band"][0] < fit["interval"][0] <= fit["interval"][1] < fit["band"][1]
        assert fit["margin_widths"] > 10, fit


def test_on_the_bundles_the_trainer_side_can_fail_the_rollout_side_cannot(knobs):
    """No capture: the fit runs on the trainer's hidden states and LM head in fp64. The trainer side
    is the trainer's own computation there, so a trainer at T = 0.9 fails; the rollout side also
    carries the drift upstream of the LM head, so a rollout outside the band is not checked."""
    weight, hidden, logits, targets = _engine()

    def bundle(trainer_t, rollout_t):
        return ProbeBundle(
            path=None,
            hidden=torch.cat(hidden),
            weight=weight,
            targets=torch.cat(targets),
            loss_mask=torch.ones(SAMPLES * TOKENS),
            rollout_log_probs=torch.cat([_recorded(z, y, rollout_t) for z, y in zip(logits, targets)]),
            trainer_log_probs=torch.cat([_recorded(z, y, trainer_t) for z, y in zip(logits, targets)]),
            segments=[(i, i * TOKENS, (i + 1) * TOKENS) for i in range(SAMPLES)],
        )

    status, text = temperature_status(temperature_check([bundle(0.9, 1.0)], None, 1.0, *_limits(knobs)))
    assert status == "fail" and "trainer's log-probs" in text, text
    status, text = temperature_status(temperature_check([bundle(1.0, 0.9)], None, 1.0, *_limits(knobs)))
    assert status == "not checked" and "upstream of the LM head" in text, text


def test_too_few_samples_is_not_checked_never_a_pass(tmp_path, knobs):
    _, _, logits, targets = _engine()
    one = [(logits[0].double(), targets[0], _recorded(logits[0], targets[0], 1.0).double())]
    fit = fit_temperature(one, 1.0, knobs.threshold("bootstrap_confidence"))
    assert fit["t_hat"] is None and "two or more" in fit["why"]
    status, text = temperature_status(temperature_check([], None, 1.0, *_limits(knobs)))
    assert status == "not checked", text


def test_the_linearised_bootstrap_matches_exact_refits(knobs):
    """Each resample's T is one Newton step from T_hat (probe_contract.fit_temperature): checked against
    refitting the same resamples exactly with the same minimiser, to well inside the interval's width."""
    import numpy as np
    from scipy.optimize import minimize_scalar

    _, _, logits, targets = _engine()
    gen = torch.Generator().manual_seed(3)
    # log-probs with 1e-3 of noise, about the drift of a bf16 rung, so the interval has a width to compare with
    data = [
        (z.double(), y, _recorded(z, y, 1.0).double() + 1e-3 * torch.randn(TOKENS, generator=gen, dtype=torch.float64))
        for z, y in zip(logits, targets)
    ]
    rng = np.random.default_rng(5)
    picks = [rng.integers(0, SAMPLES, SAMPLES) for _ in range(4)]
    counts = np.stack([np.bincount(p, minlength=SAMPLES) for p in picks])
    fit = fit_temperature(data, 1.0, knobs.threshold("bootstrap_confidence"), counts=counts)
    width = fit["interval"][1] - fit["interval"][0]
    assert width > 0
    for pick, linearised in zip(picks, fit["resampled"]):
        z, y, obs = (torch.cat([data[i][k] for i in pick]) for k in range(3))
        exact = minimize_scalar(
            lambda t, z=z, y=y, obs=obs: float(((_selected(z, y, t) - obs) ** 2).sum()), bounds=(0.5, 2), method="bounded", options={"xatol": 1e-12}
        ).x
        assert abs(exact - linearised) < 0.01 * width, (exact, linearised, width)
