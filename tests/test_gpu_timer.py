"""On a CUDA device: the protocol's timer charges a call's device time to its events and its host
side to the back-to-back rate, with and without an L2 flush; a race of a call that fits in L2
times the backends in turns."""

from __future__ import annotations

import time

import pytest
import torch

import dispatch
from dispatch.autotune import TuneSettings
from dispatch.autotune.timer import measure

pytestmark = pytest.mark.gpu

HOST_US = 300.0  # the host side of the slow-host call: far above its kernel's few microseconds


def _slow_host_call(x):
    """A tiny kernel launched after ``HOST_US`` of host work (checks, allocation, a launch path)."""
    def call():
        until = time.perf_counter() + HOST_US * 1e-6
        while time.perf_counter() < until:
            pass
        return x * 2.0
    return call


def _device_us(fn, reps=20) -> float:
    """The device time of ``fn``'s kernels, timed with the GPU kept busy ahead of them."""
    times = []
    for _ in range(reps):
        torch.cuda._sleep(2_000_000)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return sorted(times)[len(times) // 2]


@pytest.mark.parametrize("flush_l2", [False, True])
def test_events_time_the_device_alone_when_the_host_side_is_slow(flush_l2):
    x = torch.randn(1024, device="cuda")
    call = _slow_host_call(x)
    kernel_us = _device_us(lambda: x * 2.0)
    timing = measure(call, torch.device("cuda"), TuneSettings(warmup=3, rep=10, flush_l2=flush_l2, host_bound=False))
    assert timing.median_us < kernel_us + 30.0, (timing.median_us, kernel_us)


@pytest.mark.parametrize("flush_l2", [False, True])
def test_the_back_to_back_rate_charges_a_slow_host_side(flush_l2):
    x = torch.randn(1024, device="cuda")
    timing = measure(_slow_host_call(x), torch.device("cuda"),
                     TuneSettings(warmup=3, rep=10, flush_l2=flush_l2, host_bound=True))
    assert timing.median_us >= 0.9 * HOST_US, timing.median_us


def test_a_long_kernel_is_timed_in_full_after_the_head_start():
    cycles = 400_000  # some hundreds of microseconds on any current GPU
    sleep_us = _device_us(lambda: torch.cuda._sleep(cycles))
    timing = measure(lambda: torch.cuda._sleep(cycles), torch.device("cuda"),
                     TuneSettings(warmup=3, rep=10, flush_l2=False, host_bound=False))
    assert 0.9 * sleep_us <= timing.median_us <= 1.1 * sleep_us + 5.0, (timing.median_us, sleep_us)


@pytest.mark.parametrize("shape, in_turns", [((4, 4096), True), ((8192, 8192), False)], ids=["fits-in-l2", "flushed"])
def test_a_race_times_the_backends_in_turns_where_the_call_fits_in_l2(shape, in_turns):
    dispatch.configure(autotune=True)
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    out = dispatch.softmax(x, -1)
    torch.testing.assert_close(out.float(), torch.softmax(x.float(), -1), atol=2e-2, rtol=2e-2)
    decision = dispatch.explain("softmax", x, -1).decision
    raced = [c for c in decision.candidates if c.latency_us is not None]
    assert decision.policy == "measured" and len(raced) >= 2, decision.reason
    assert ("rounds in turn" in decision.reason) is in_turns, decision.reason
