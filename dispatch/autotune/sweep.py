"""dispatch's own sweep: build, check against the reference, time, and pick a winner."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs
import torch

from ..errors import TuneError
from ..tolerance import mismatch
from .space import Config, Failure, Timing, TuneResult, TuneSettings
from .timer import measure


def pick_winner(timings: Sequence[Timing], tie_tolerance: float) -> Timing:
    """The fastest timing; any within ``tie_tolerance`` (relative) of it ties, and the earliest
    in candidate order wins the tie, so two runs pick the same config."""
    if not timings:
        raise TuneError("no timings to pick from")
    best = min(t.median_us for t in timings)
    for timing in timings:
        if timing.median_us <= best * (1.0 + tie_tolerance):
            return timing
    raise AssertionError("unreachable: the minimum is within its own tolerance")


def pick_backend(timings: Sequence[Timing], reference: str | None, settings: TuneSettings = TuneSettings(),
                 on_device: bool = False) -> Timing:
    """The winner of a race between backends (each timing's config is ``{"name": backend}``): the
    fastest, as :func:`pick_winner` picks, unless ``reference`` (the reference backend's name) is
    within the margin of it (:func:`reference_margin`): a kernel must beat the reference clearly
    to serve in its place."""
    best = pick_winner(timings, settings.tie_tolerance)
    ref = next((t for t in timings if t.config.get("name") == reference), None)
    margin = reference_margin(settings, on_device)
    if ref is not None and ref is not best and ref.median_us <= best.median_us * (1.0 + margin):
        return ref
    return best


def reference_margin(settings: TuneSettings, on_device: bool) -> float:
    """The lead a backend needs over the reference to win a race: ``settings.reference_margin``
    for wall times of launch-bound calls, ``settings.device_reference_margin`` where the race was
    timed on the device (``on_device``: a GPU call from a flushed L2, or ``timing="device"``)."""
    return settings.device_reference_margin if on_device else settings.reference_margin


def race_verdict(timings: Sequence[Timing], winner: Timing, reference: str | None,
                 settings: TuneSettings = TuneSettings(), on_device: bool = False) -> str:
    """Why ``winner`` won a race between backends, in a few words (explain and the cache show it)."""
    slower = min(t.median_us for t in timings) < winner.median_us * (1.0 - 1e-9)
    if slower and winner.config.get("name") == reference:
        return f"within {reference_margin(settings, on_device):.0%} of the fastest when raced, so the reference"
    if slower:  # (pick_winner's tie: the first in the static order of those within the tolerance)
        return f"within {settings.tie_tolerance:.0%} of the fastest when raced (a tie), and first in the static order"
    return "fastest when raced"


def sweep(candidates: Sequence[Config], make_runner: Callable[[Config], Callable[[], torch.Tensor]],
          reference: torch.Tensor | None, device: torch.device, settings: TuneSettings = TuneSettings(),
          what: str = "kernel", progress: Callable[[Config], None] | None = None,
          tolerance: tuple[float, float] | None = None, first: Config | None = None,
          timer: Callable[..., Timing] | None = None, intact: Callable[[], str | None] | None = None) -> TuneResult:
    """Measure every candidate and return the winner with every timing and failure.

    ``make_runner(config)`` builds a zero-argument callable that runs the kernel on fixed inputs.
    Each candidate's first output is checked against ``reference`` (when given) before it is
    timed; a candidate that fails to build, raises, or differs is recorded as a failure with its
    reason. If nothing could be measured, :class:`TuneError` lists every config and its failure.

    ``first`` (the space's default, say) is timed first, so that the early stop has a good
    time to compare with: from the second candidate on, a measurement is told to stop after its
    first ``settings.probe_rep`` repetitions when their median is more than
    ``settings.early_stop`` times the best full median so far (``TuneSettings.stop_above_us``).
    Such a candidate keeps that shorter timing (fewer ``reps``); it cannot win, being far behind
    one timed in full. Ties are still resolved in the candidates' order. ``timer`` (default
    :func:`~dispatch.autotune.timer.measure`) takes ``(fn, device, settings, config)``. ``intact``,
    asked after each candidate's first run: why the shared inputs are no longer what they were (a
    candidate wrote into them), or None; such a candidate ends the sweep with a :class:`TuneError`
    naming it (the inputs of every later candidate would be wrong).
    """
    timer = timer or measure
    order = list(candidates)
    if first is not None and first in order:
        order.remove(first)
        order.insert(0, first)
    timings: list[Timing] = []
    failures: list[Failure] = []
    best_full: float | None = None
    for config in order:
        if progress is not None:
            progress(config)
        try:
            runner = make_runner(config)
            out = runner()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # a candidate's crash (SystemExit too) is data, not a crash of the sweep
            failures.append(Failure(config, f"{type(exc).__name__}: {exc}"))
            continue
        broken = intact() if intact is not None else None
        if broken is not None:
            raise TuneError(f"tuning {what}: candidate {config} {broken}; the backend is not used for this call")
        if reference is not None:
            why = mismatch(out, reference, tolerance) if isinstance(out, torch.Tensor) else (
                f"returned {type(out).__name__}, not a tensor")
            if why is not None:
                failures.append(Failure(config, f"wrong result: {why}"))
                continue
        try:
            bound = settings.early_stop * best_full if settings.early_stop and best_full is not None else None
            timing = timer(runner, device, attrs.evolve(settings, stop_above_us=bound), config)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            failures.append(Failure(config, f"{type(exc).__name__} while timing: {exc}"))
            continue
        timings.append(timing)
        if bound is None or timing.median_us <= bound:  # timed in full (a stopped one is far behind)
            best_full = timing.median_us if best_full is None else min(best_full, timing.median_us)
    if not timings:
        lines = "\n".join(f"  - {f.config}: {f.reason}" for f in failures) or "  (no candidates)"
        raise TuneError(f"tuning {what} measured no config; every candidate failed:\n{lines}")
    rank = {config: i for i, config in enumerate(candidates)}
    timings.sort(key=lambda t: rank.get(t.config, len(rank)))  # ties go to the earlier candidate of the space
    best = pick_winner(timings, settings.tie_tolerance)
    return TuneResult(config=best.config, latency_us=best.median_us, spread_us=best.spread_us,
                      timings=tuple(timings), failures=tuple(failures), source="sweep")
