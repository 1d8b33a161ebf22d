"""The protocol's timer: CUDA events with an L2 flush on the GPU, perf_counter on the CPU."""

from __future__ import annotations

import statistics
import threading
import time
from typing import Callable

import torch

from .space import Config, Timing, TuneSettings

_L2_FLUSH_BYTES = 256 * 1024 * 1024  # larger than any current L2 (H200: 50 MB)
_BURST = 20  # back-to-back calls timed for a call's host-bound rate, at least
_BURST_MAX = 200  # and at most: enough for a burst of _BURST_US where the calls are that short
_BURST_US = 2000.0  # (one synchronisation per burst is then a small share of it)
_BURSTS = 5  # bursts of them, the median kept
FINAL_ROUNDS = 9  # rounds of interleaved_wall: each contender's median of this many bursts
_HEAD_START_MIN_US = 50.0  # the least GPU delay queued ahead of a timed repetition
_HEAD_START_MAX_US = 2000.0  # and the most (a call whose host side takes longer is rare and slow anyway)
_cycles_per_us: dict[torch.device, float] = {}
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
    with events around the device's work alone: it is preceded (with ``settings.flush_l2``, after
    an L2 flush) by a GPU delay longer than the call's host side (:func:`_head_start`), so the
    host has queued the call before the GPU reaches it.
    With ``settings.host_bound`` the median is at least the per-call time of a burst of
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
        host_us = []  # each warm-up call's host side (its first may compile)
        for _ in range(settings.warmup):
            begun = time.perf_counter()
            fn()
            host_us.append((time.perf_counter() - begun) * 1e6)
        torch.cuda.synchronize()
        host = statistics.median(host_us)
        head_start = _head_start(device, host)
        samples: list[float] = []
        for part in _parts(settings):
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(part)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(part)]
            for start, end in zip(starts, ends):
                if settings.flush_l2:
                    _flush_l2(device)
                torch.cuda._sleep(head_start)
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
            median = max(median, _back_to_back_us(fn, _burst_calls(max(median, host))))
    return Timing(cfg, median, spread, len(samples))


def _head_start(device: torch.device, host_us: float) -> int:
    """GPU clock cycles to queue ahead of each timed repetition: four times the call's host side
    (``host_us``, from the warm-up; the margin covers the delay's own launch and the events'),
    within ``_HEAD_START_MIN_US`` and ``_HEAD_START_MAX_US``.

    Events time from the moment the GPU reaches the start event. On an idle GPU that is at once,
    and the kernel arrives only when the call's host side (checks, allocation, launch) has run,
    so the events would time the host's part of the call as well as the device's, and calls
    whose host side outlasts their kernel would all come out near their host time plus their
    kernel's. A delay queued first keeps the GPU busy while the host queues the start event, the
    call and the end event, so the events time the device's work alone; the host's part is what
    ``host_bound``'s back-to-back rate charges."""
    delay_us = min(max(4.0 * host_us, _HEAD_START_MIN_US), _HEAD_START_MAX_US)
    return max(1, int(delay_us * _clock_cycles_per_us(device)))


def _clock_cycles_per_us(device: torch.device) -> float:
    """The rate of the clock that ``torch.cuda._sleep`` counts, measured once per device."""
    rate = _cycles_per_us.get(device)
    if rate is None:
        cycles = 1_000_000
        torch.cuda._sleep(cycles)  # the first launch loads the kernel
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        rate = _cycles_per_us[device] = cycles / max(start.elapsed_time(end) * 1e3, 1e-3)
    return rate


def interleaved_wall(runs: dict[str, Callable[[], object]], device: torch.device,
                     rounds: int = FINAL_ROUNDS) -> dict[str, Timing]:
    """Each of ``runs``' per-call wall time of back-to-back calls, in ``rounds`` rounds, every
    contender once a round, the order rotated each round; ``{name: Timing}`` (config
    ``{"name": name}``, the median and inter-quartile spread over the rounds, in us).

    What a race between backends compares for calls that are not timed after an L2 flush. A
    call whose kernel takes a few microseconds costs what its host side costs, and the host of
    a GPU machine speeds up and slows down by several microseconds a call within a minute: timed
    one after the other, contenders a microsecond apart come out in whichever order the drift
    puts them. Timed in turns, every contender meets the same drift. A burst's length
    (:func:`_burst_calls`) is judged from one burst of ``_BURST`` calls first."""
    if rounds < 1:
        raise ValueError(f"'rounds' must be >= 1 (got {rounds!r})")
    if device.type == "cuda":
        with torch.cuda.device(device):
            return _interleaved_wall(runs, rounds, torch.cuda.synchronize)
    return _interleaved_wall(runs, rounds, lambda: None)


def _interleaved_wall(runs, rounds, sync) -> dict[str, Timing]:
    names = list(runs)
    # each contender's burst length, from a first burst (which also warms it up)
    calls = {name: _burst_calls(_back_to_back_us(runs[name], _BURST, bursts=1, sync=sync)) for name in names}
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name].append(_back_to_back_us(runs[name], calls[name], bursts=1, sync=sync))
    return {name: Timing(Config({"name": name}), *_summary(values), len(values)) for name, values in samples.items()}


def _burst_calls(per_call_us: float) -> int:
    """Calls in a burst of back-to-back calls that take ``per_call_us`` each: about ``_BURST_US``
    of them, at least ``_BURST``, at most ``_BURST_MAX``."""
    return min(max(_BURST, int(_BURST_US / max(per_call_us, 1.0))), _BURST_MAX)


def _back_to_back_us(fn, calls: int, bursts: int = _BURSTS, sync: Callable[[], object] = torch.cuda.synchronize
                     ) -> float:
    """Per-call wall time of ``calls`` calls issued back to back (one synchronisation at the end),
    the median of ``bursts`` such bursts (one burst is at the mercy of whatever else the host does
    during it: a race between candidates a few microseconds apart needs the median).

    Events bracket the GPU work only; a call whose host side (checks, launch) outlasts its kernel
    leaves the GPU idle between calls, which this rate shows and the events do not."""
    rates = []
    for _ in range(bursts):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
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
