"""Queued timing (measure.time_ms_paired_queued) times the GPU's work, not the host's time to issue it.

The bench reports each operator's time twice: from an idle GPU (the span holds the host's issue time)
and queued behind a sleep kernel (bench.METHOD). These tests give a call a known host delay before its
one kernel and check that the idle-start timing sees the delay, the queued timing does not, and the
queue says it held; and that a call which waits for the GPU inside is reported as not held.
"""

from __future__ import annotations

import time

import pytest
import torch

from harness.operators import measure

pytestmark = pytest.mark.operator

HOST_DELAY_S = 0.004  # far above a small GEMM's GPU time (tens of microseconds)


def test_off_the_gpu_there_is_no_queued_timing():
    assert measure.time_ms_paired_queued(lambda: None, lambda: None, torch.device("cpu")) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_queued_timing_leaves_out_the_hosts_issue_time():
    a = torch.randn(256, 256, device="cuda")

    def slow_host():
        time.sleep(HOST_DELAY_S)  # host work before the launch, as an operator's checks are
        return a @ a

    def fast():
        return a @ a

    idle_ms, _ = measure.time_ms_paired(slow_host, fast, torch.device("cuda"), 2, 5)
    queued = measure.time_ms_paired_queued(slow_host, fast, torch.device("cuda"), 2, 5)
    assert idle_ms >= HOST_DELAY_S * 1e3 * 0.9, idle_ms
    assert queued["held"] == 1.0, queued
    assert queued["ms"] < 0.5 * HOST_DELAY_S * 1e3, queued


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_a_call_that_waits_for_the_gpu_is_not_held():
    a = torch.randn(256, 256, device="cuda")

    def syncs():
        out = a @ a
        torch.cuda.synchronize()  # waits for the sleep ahead of it: the queue cannot hold
        return out

    queued = measure.time_ms_paired_queued(syncs, lambda: a @ a, torch.device("cuda"), 2, 5)
    assert queued["held"] == 0.5, queued  # the GEMM's calls held, the syncing call's did not


def test_the_record_fields_are_named_as_the_docs_name_them():
    queued = {"ms": 3.0, "ref_ms": 2.0, "held": 1.0, "sleep_ms": 0.5}
    assert measure.queued_fields(queued) == {"ms_median_queued": 3.0, "gemm_ms_queued": 2.0, "x_gemm_queued": 1.5, "queued_held": 1.0}
    assert set(measure.queued_fields(queued, "fwd_bwd_")) == {
        "fwd_bwd_ms_median_queued",
        "fwd_bwd_gemm_ms_queued",
        "fwd_bwd_x_gemm_queued",
        "fwd_bwd_queued_held",
    }
    assert measure.queued_fields(None) == {}  # off the GPU: no queued fields, not zeros
