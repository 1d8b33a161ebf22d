"""The protocol's timer: CUDA events with an L2 flush on the GPU, perf_counter on the CPU."""

from __future__ import annotations

import statistics
import threading
import time
from typing import Callable

import torch

from .space import Config, Timing, TuneSettings

_L2_FLUSH_BYTES = 256 * 1024 * 1024  # larger than any current L2 (H200: 50 MB)
_BURST = 20  # back-to-back calls timed for a call's host-bound rate
_BURSTS = 5  # bursts of them, the median kept
_flush_buffers: dict[torch.device, torch.Tensor] = {}
_count_lock = threading.Lock()
_measured = 0


def measurement_count() -> int:
    """How many candidate measurements this process has made (a warm cache makes none)."""
    return _measured


def _count() -> None:
    global _measured
    with _count_lock:
        _measured += 1


def _flush_l2(device: torch.device) -> None:
    buf = _flush_buffers.get(device)
    if buf is None:
        buf = _flush_buffers[device] = torch.empty(_L2_FLUSH_BYTES, dtype=torch.int8, device=device)
    buf.zero_()


def _summary(samples_us: list[float]) -> tuple[float, float]:
    samples_us = sorted(samples_us)
    median = statistics.median(samples_us)
    if len(samples_us) >= 4:
        q = statistics.quantiles(samples_us, n=4)
        spread = q[2] - q[0]
    else:
        spread = samples_us[-1] - samples_us[0]
    return median, max(spread, 0.0)


def measure(fn: Callable[[], object], device: torch.device, settings: TuneSettings = TuneSettings(),
            config: Config | None = None) -> Timing:
    """Time ``fn`` on ``device``: ``settings.warmup`` untimed calls, then ``settings.rep`` timed.

    Returns the median and inter-quartile spread in microseconds. On CUDA each repetition is timed
    with events and, with ``settings.flush_l2``, preceded by an L2 flush outside the timed region;
    with ``settings.host_bound`` the median is at least the per-call time of a burst of
    back-to-back calls, so a call whose host side outlasts its kernel is charged for it.

    With ``settings.stop_above_us``, the median of the first ``settings.probe_rep`` repetitions
    is looked at first: above that bound, the candidate is far behind and those repetitions are
    its timing (``reps`` says how many); else the remaining repetitions follow.
    """
    _count()
    cfg = config if config is not None else Config({})
    if device.type == "cuda":
        return _measure_cuda(fn, device, settings, cfg)
    for _ in range(settings.warmup):
        fn()
    samples: list[float] = []
    for part in _parts(settings):
        for _ in range(part):
            start = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start) * 1e6)
        if _behind(samples, settings):
            break
    median, spread = _summary(samples)
    return Timing(cfg, median, spread, len(samples))


def _parts(settings: TuneSettings) -> tuple[int, ...]:
    """The repetitions in one or two runs: the probe first when an early stop may end it."""
    if settings.stop_above_us is None or settings.probe_rep >= settings.rep:
        return (settings.rep,)
    return (settings.probe_rep, settings.rep - settings.probe_rep)


def _behind(samples_us: list[float], settings: TuneSettings) -> bool:
    return settings.stop_above_us is not None and statistics.median(samples_us) > settings.stop_above_us


def _measure_cuda(fn, device, settings, cfg) -> Timing:
    with torch.cuda.device(device):
        for _ in range(settings.warmup):
            fn()
        torch.cuda.synchronize()
        samples: list[float] = []
        for part in _parts(settings):
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(part)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(part)]
            for start, end in zip(starts, ends):
                if settings.flush_l2:
                    _flush_l2(device)
                start.record()
                fn()
                end.record()
            torch.cuda.synchronize()
            samples += [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
            if _behind(samples, settings):  # far behind: the back-to-back rate could only add to it
                median, spread = _summary(samples)
                return Timing(cfg, median, spread, len(samples))
        median, spread = _summary(samples)
        if settings.host_bound:
            median = max(median, _back_to_back_us(fn, min(settings.rep, _BURST)))
    return Timing(cfg, median, spread, len(samples))


def _back_to_back_us(fn, calls: int, bursts: int = _BURSTS) -> float:
    """Per-call wall time of ``calls`` calls issued back to back (one synchronisation at the end),
    the median of ``bursts`` such bursts (one burst is at the mercy of whatever else the host does
    during it: a race between candidates a few microseconds apart needs the median).

    Events bracket the GPU work only; a call whose host side (checks, launch) outlasts its kernel
    leaves the GPU idle between calls, which this rate shows and the events do not."""
    rates = []
    for _ in range(bursts):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        rates.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(rates)


def do_bench(fn: Callable[[], object], warmup: int = 25, rep: int = 50, quantiles=None, **_: object) -> float:
    """A ``triton.testing.do_bench``-shaped timer (milliseconds) built on :func:`measure`.

    For DSL autotuners that take a ``do_bench=`` (Triton's): on the CPU, under the interpreter,
    there are no CUDA events. ``warmup`` and ``rep`` are counts here, not milliseconds.
    """
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    timing = measure(fn, device, TuneSettings(warmup=max(1, int(warmup)), rep=max(1, int(rep))))
    ms = timing.median_us / 1e3
    if quantiles is not None:
        return [ms for _ in quantiles]
    return ms
