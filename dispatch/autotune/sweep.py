"""dispatch's own sweep: build, check against the reference, time, and pick a winner."""

from __future__ import annotations

from collections.abc import Callable, Sequence

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


def sweep(candidates: Sequence[Config], make_runner: Callable[[Config], Callable[[], torch.Tensor]],
          reference: torch.Tensor | None, device: torch.device, settings: TuneSettings = TuneSettings(),
          what: str = "kernel", progress: Callable[[Config], None] | None = None,
          tolerance: tuple[float, float] | None = None) -> TuneResult:
    """Measure every candidate and return the winner with every timing and failure.

    ``make_runner(config)`` builds a zero-argument callable that runs the kernel on fixed inputs.
    Each candidate's first output is checked against ``reference`` (when given) before it is
    timed; a candidate that fails to build, raises, or differs is recorded as a failure with its
    reason. If nothing could be measured, :class:`TuneError` lists every config and its failure.
    """
    timings: list[Timing] = []
    failures: list[Failure] = []
    for config in candidates:
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
        if reference is not None:
            why = mismatch(out, reference, tolerance) if isinstance(out, torch.Tensor) else (
                f"returned {type(out).__name__}, not a tensor")
            if why is not None:
                failures.append(Failure(config, f"wrong result: {why}"))
                continue
        try:
            timings.append(measure(runner, device, settings, config))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            failures.append(Failure(config, f"{type(exc).__name__} while timing: {exc}"))
    if not timings:
        lines = "\n".join(f"  - {f.config}: {f.reason}" for f in failures) or "  (no candidates)"
        raise TuneError(f"tuning {what} measured no config; every candidate failed:\n{lines}")
    best = pick_winner(timings, settings.tie_tolerance)
    return TuneResult(config=best.config, latency_us=best.median_us, spread_us=best.spread_us,
                      timings=tuple(timings), failures=tuple(failures), source="sweep")
