"""The envelope's reference e4m3 quantiser (harness.attribution.fp8_reference), written from the
format's definition, against torch's float8_e4m3fn (every finite code, every midpoint between
neighbours, random values) and against the engine's emulation it is kept apart from."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.attribution import fp8_reference as ref

pytestmark = pytest.mark.attribution


def _codes() -> np.ndarray:
    """Every finite e4m3fn value, decoded by torch from its bit pattern."""
    values = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy().astype(np.float64)
    return np.unique(values[np.isfinite(values)])


def test_the_format_has_the_values_its_definition_gives():
    codes = _codes()
    assert codes.max() == ref.E4M3_MAX == 448.0 and codes.min() == -448.0
    assert np.min(codes[codes > 0]) == 2.0**-9  # the smallest subnormal: (1/8) * 2^-6
    assert np.array_equal(ref.round_e4m3(codes), codes)  # every code is its own nearest value


def test_rounding_matches_torchs_cast_on_midpoints_and_random_values():
    codes = _codes()
    mids = (codes[1:] + codes[:-1]) / 2  # ties: to the even mantissa
    near = np.concatenate([mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf)])
    rng = np.random.default_rng(0)
    rand = np.concatenate([rng.uniform(-448, 448, 20000), rng.normal(0, 1e-2, 20000), rng.normal(0, 1.0, 20000)])
    for y in (near, rand):
        y32 = y.astype(np.float32)  # the engine casts fp32 values
        theirs = torch.from_numpy(y32).to(torch.float8_e4m3fn).float().numpy().astype(np.float64)
        assert np.array_equal(ref.round_e4m3(y32.astype(np.float64)), theirs)


def test_saturates_beyond_the_largest_finite_value():
    assert np.array_equal(ref.round_e4m3(np.array([460.0, -1e6, 449.0])), np.array([448.0, -448.0, 448.0]))


def test_block_and_group_round_trips_agree_with_the_engine_emulation_today():
    from harness.embedded import fp8 as engine

    g = torch.Generator().manual_seed(1)
    w = torch.randn(200, 136, generator=g) * 0.05
    x = torch.randn(5, 7, 136, generator=g)
    assert torch.equal(ref.quantize_weight_blockwise(w), engine.quantize_weight_blockwise(w))
    assert torch.equal(ref.quantize_activation_groups(x), engine.quantize_activation_groups(x))
    assert torch.equal(ref.quantize_activation_groups(x[..., :64]), engine.quantize_activation_groups(x[..., :64]))


def test_a_wrong_scale_in_the_engine_would_show_against_the_reference(monkeypatch):
    """The reason the envelope keeps its own quantiser: a fault in the engine's emulation (a scale of
    amax / 224, say) moves the engine's values, not the reference's."""
    from harness.embedded import fp8 as engine

    w = torch.randn(128, 128, generator=torch.Generator().manual_seed(2)) * 0.05
    monkeypatch.setattr(engine, "E4M3_MAX", 224.0)
    assert not torch.equal(ref.quantize_weight_blockwise(w), engine.quantize_weight_blockwise(w))
