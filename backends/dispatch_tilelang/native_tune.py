"""Run TileLang's own autotuner over one kernel family the way the autotune protocol requires.

``tilelang.autotune`` (0.1.11+) binds the JIT signature before it applies any candidate, and
treats tunable arguments present in that call as "already tuned". Observed on 0.1.15:

* no seeds, no ``do_not_specialize``: the sweep runs (0.1.15 no longer raises the 0.1.11
  ``TypeError`` here);
* no seeds, with ``do_not_specialize``: ``TypeError: missing a required argument: 'block_m'``
  (the exclusion binds the signature);
* seeds without ``do_not_specialize``: the sweep is skipped -- the autotuner logs "Tunable
  parameters [...] already provided during auto-tuning. Skipping compilation and using direct
  JIT" and returns the seeded kernel with ``config=None, latency=None``;
* seeds with ``do_not_specialize``: the full sweep, and the seeds stay out of the cache key,
  so a later call with other seed values reuses the tuned kernel.

``tune_native`` does the last: seeds required tunables from the default config (through the
alias map), passes them as ``do_not_specialize``, strips build-time keys, and never returns a
``None`` config or latency: a sweep that measured nothing raises ``TuneError`` naming every
config and why it failed (TileLang only writes those reasons to its debug log).

Two side effects of TileLang's autotuner are contained: its logger would create
``autotuner.log`` in the current directory and print to stdout on first use; here its records
go to the ``dispatch_tilelang.native_tune`` logger (at DEBUG) instead. And its timer is CUDA events, which
cannot run without a GPU; ``timer="wall"`` (the default for the C target) swaps in TileLang's
own wall-clock timer so the native path also completes on a CPU.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from dispatch.backend import TuneError, seed_kwargs, split_build_keys, to_config_keys

logger = logging.getLogger(__name__)

_SKIP_MESSAGE = "already provided during auto-tuning"


class _Capture(logging.Handler):
    """Collects TileLang autotuner records during one tuning call and forwards them to our logger."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        logger.debug("tilelang autotuner %s: %s", record.levelname, record.getMessage())

    def messages(self, min_level: int = logging.DEBUG) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno >= min_level]


def _tuner_logger() -> logging.Logger:
    """TileLang's autotuner logger, with its file/stdout handlers suppressed (they are installed lazily)."""
    from tilelang.autotuner import tuner

    if not getattr(tuner, "_logger_handlers_initialized", True):
        tuner._logger_handlers_initialized = True  # skip creating ./autotuner.log and a stdout handler
    return tuner.logger


def _failure_reasons(messages: list[str], configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per config: TileLang logs a warning naming the config, then the traceback at DEBUG."""
    reasons: dict[int, str] = {}
    current = None
    for msg in messages:
        hit = re.search(r"(?:testing|for) config (\{.*?\})(?: at index (\d+))?", msg)
        if hit:
            current = hit.group(1)
            if "Compilation failed" in msg:
                reasons[len(reasons)] = f"{current}: compile error: {msg.split('with error:', 1)[-1].strip()}"
                current = None
            elif "timeout" in msg.lower():
                reasons[len(reasons)] = f"{current}: benchmark timed out"
                current = None
            continue
        if current is not None and msg.startswith("Error:"):
            last = [line for line in msg.splitlines() if line.strip()][-1].strip()
            reasons[len(reasons)] = f"{current}: {last}"
            current = None
    lines = list(reasons.values())
    if not lines:
        lines = [f"{dict(c)}: no result (see the dispatch_tilelang.native_tune debug log)" for c in configs]
    return lines


def tuned_result(kernel: Any, messages: Iterable[str] = (), seeds: Mapping[str, Any] | None = None) -> tuple[dict, float]:
    """``(config, latency)`` of what a ``tilelang.autotune``-wrapped program returned; never None.

    TileLang's skip path (seeded tunables without ``do_not_specialize``) hands back a kernel with
    ``config=None, latency=None``; comparing that latency with a float is the ``TypeError: '<' not
    supported between instances of 'NoneType' and 'float'`` of the field. This turns it into a
    ``TuneError`` that says why, quoting TileLang's warning when ``messages`` holds it.
    """
    config, latency = getattr(kernel, "config", None), getattr(kernel, "latency", None)
    if config is None or latency is None:
        skipped = [m for m in messages if _SKIP_MESSAGE in m]
        why = skipped[0] if skipped else "the result carries no config/latency (TileLang skipped the sweep)"
        raise TuneError(
            f"TileLang's autotuner returned config={config!r}, latency={latency!r}: {why}. Seeded tunables "
            f"must be passed to tilelang.autotune as do_not_specialize (seeds: {dict(seeds or {})})."
        )
    return dict(config), float(latency)


def _check_winner(kernel, ref_prog, inputs, rtol: float, atol: float, config) -> None:
    import torch

    got, want = kernel(*inputs), ref_prog(*inputs)
    try:
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True, check_dtype=False)
    except AssertionError as exc:
        raise TuneError(f"the winning config {config} does not match the reference: {exc}") from exc


def _configured_autotune(timer: str, group_size: int):
    """``tilelang.autotune`` whose benchmark uses ``timer`` ("event", "cupti", "cudagraph" or "wall")
    and which, when ``group_size > 1``, compiles up to that many candidates as one module
    (TileLang's grouped compilation; it falls back to one module per candidate, with a warning,
    on targets that lack it)."""
    from tilelang.autotuner.tuner import AutoTuneImpl, autotune

    if timer == "event" and group_size <= 1:  # TileLang's defaults: nothing to change
        return autotune

    @dataclasses.dataclass
    class _ConfiguredAutoTuneImpl(AutoTuneImpl):
        timer: str = "event"
        group_size: int = 1

        def get_tunner(self):  # (sic) TileLang's name
            tuner = super().get_tunner()
            tuner.profile_args = dataclasses.replace(tuner.profile_args, backend=self.timer)
            if self.group_size > 1:
                tuner.run = functools.partial(tuner.run, enable_grouped_compile=True,
                                              group_compile_size=self.group_size)
            return tuner

    def wrapped(**kwargs):
        decorate = autotune(**kwargs)

        def apply(jit_impl):
            impl = decorate(jit_impl)
            fields = {f.name: getattr(impl, f.name) for f in dataclasses.fields(AutoTuneImpl)}
            return _ConfiguredAutoTuneImpl(**fields, timer=timer, group_size=group_size)

        return apply

    return wrapped


def tune_native(
    program_factory: Any,
    configs: Iterable[Mapping[str, Any]],
    default_config: Mapping[str, Any],
    tunables: Iterable[str],
    aliases: Mapping[str, str] | None = None,
    warmup: int = 25,
    rep: int = 50,
    *,
    inputs: Sequence[Any] | None = None,
    ref_prog: Callable[..., Any] | None = None,
    rtol: float = 1e-2,
    atol: float = 1e-2,
    timer: str | None = None,
    timeout: int = 100,
    call_args: Sequence[Any] = (),
    call_kwargs: Mapping[str, Any] | None = None,
    group_compile: bool | None = None,
    return_kernel: bool = False,
) -> tuple[dict[str, Any], float] | tuple[dict[str, Any], float, Any]:
    """Tune one kernel family with ``tilelang.autotune``; return ``(best_config, latency_ms)``, never None.

    Args:
        program_factory: the family's ``@tilelang.jit`` program (a TileLang ``JITImpl``) whose
            tunable parameters may be required (no defaults).
        configs: candidate configs in config-key space. Build-time keys (anything that is not a
            JIT parameter after aliasing, e.g. ``tile_n``) are stripped; they must be equal
            across ``configs`` -- one family per call -- and come back in ``best_config``.
        default_config: seeds for the required tunables (keys missing there are taken from the
            first candidate).
        tunables: the config keys the sweep varies.
        aliases: ``{jit_param_name: config_key}`` where the names differ.
        warmup, rep: iterations per candidate for TileLang's benchmark (it reports the mean).
        inputs: the input tensors to time on (needed whenever a shape is dynamic); given to
            TileLang through ``set_autotune_inputs``.
        ref_prog, rtol, atol: when ``ref_prog`` is given, every candidate's output must match it
            before it may win (TileLang's ``assert_allclose``). That check synchronizes CUDA, so
            with the wall timer (CPU) only the winner is checked, after the sweep.
        timer: TileLang profiler backend. Default: "event" (CUDA events, L2 flushed) for CUDA
            programs, "wall" for CPU targets, where events do not exist.
        call_args, call_kwargs: non-tunable arguments of the program, if it has any.
        group_compile: compile the candidates as one module (TileLang's grouped compilation:
            one nvcc run instead of one per candidate). Default: on for CUDA programs, where
            TileLang 0.1.15 otherwise compiles candidates one after another.
        return_kernel: also return the winner's compiled ``JITKernel`` (third item).

    Raises:
        TuneError: the configs span several families, TileLang skipped the sweep (config or
            latency None), or no candidate compiled and ran -- the message names every config
            and why it failed.
    """
    from tilelang.autotuner import set_autotune_inputs

    configs = [dict(c) for c in configs]
    if not configs:
        raise TuneError("tune_native: no configs to tune")
    jit_configs, build_sets = [], []
    for cfg in configs:
        jit_kwargs, build = split_build_keys(cfg, program_factory, aliases)
        jit_configs.append(jit_kwargs)
        build_sets.append(build)
    if any(b != build_sets[0] for b in build_sets):
        families = sorted({tuple(sorted(b.items())) for b in build_sets})
        raise TuneError(
            f"tune_native tunes one kernel family per call, but the configs span {len(families)} "
            f"build-time settings {families}; group them (e.g. by tile_n) and tune each group on its own"
        )
    build_keys = build_sets[0]
    unique: list[dict] = []
    for cfg in jit_configs:
        if cfg not in unique:
            unique.append(cfg)

    seeds = seed_kwargs(program_factory, default_config, tunables, aliases, fallback_config=to_config_keys(unique[0], aliases))
    if timer is None:
        target = getattr(program_factory, "target", None)
        kind = target.get("kind") if isinstance(target, dict) else str(target or "")
        timer = "event" if kind.startswith("cuda") else "wall"
    if group_compile is None:
        group_compile = timer != "wall"

    # TileLang's reference check synchronizes CUDA, so on the wall timer (CPU) the winner is
    # checked here instead, after the sweep.
    check_in_tilelang = ref_prog is not None and timer != "wall"
    decorate = _configured_autotune(timer, len(unique) if group_compile else 1)(
        configs=unique,
        warmup=warmup,
        rep=rep,
        timeout=timeout,
        ref_prog=ref_prog if check_in_tilelang else None,
        rtol=rtol,
        atol=atol,
        skip_check=not check_in_tilelang,
        do_not_specialize=list(seeds) or None,
    )
    autotuned = decorate(program_factory)

    tl_logger = _tuner_logger()
    capture = _Capture()
    tl_logger.addHandler(capture)
    try:
        try:
            if inputs is not None:
                with set_autotune_inputs(list(inputs)):
                    kernel = autotuned(*call_args, **dict(call_kwargs or {}), **seeds)
            else:
                kernel = autotuned(*call_args, **dict(call_kwargs or {}), **seeds)
        except RuntimeError as exc:
            if "Auto-tuning failed" not in str(exc):
                raise
            lines = _failure_reasons(capture.messages(), unique)
            raise TuneError(
                f"TileLang's autotuner measured none of {len(unique)} config(s) "
                f"(build keys {build_keys}, timer {timer!r}):\n  " + "\n  ".join(lines)
            ) from exc
    finally:
        tl_logger.removeHandler(capture)

    config, latency = tuned_result(kernel, capture.messages(logging.WARNING), seeds)
    if ref_prog is not None and not check_in_tilelang and inputs is not None:
        _check_winner(kernel, ref_prog, inputs, rtol, atol, config)
    best = to_config_keys({k: v for k, v in config.items() if k != "pass_configs"}, aliases)
    best.update(build_keys)
    if return_kernel:
        return best, float(latency), kernel
    return best, float(latency)
