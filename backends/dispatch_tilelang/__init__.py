"""The TileLang backend: the softmax family (any dim, read in place) and rms_norm/layer_norm, as TileLang programs.

CUDA kernels (``tilelang.language``) on NVIDIA GPUs, C kernels (TileLang's CPU dialect, target
"c") on the CPU. On the GPU the candidates are compiled at once on a thread pool
(``dispatch_precompile``), then dispatch's sweep times them; with
``DISPATCH_TILELANG_NATIVE_AUTOTUNE=1``, TileLang's own ``autotune`` tunes each kernel family
instead (``tile_n`` / ``cluster``, build-time keys stripped before TileLang sees a config) with
seeded required tunables and ``do_not_specialize``. On the CPU, dispatch's own sweep tunes the C kernels.

The softmax family over the last, unit-stride dim runs the row kernels (so does logsumexp over
trailing dims dense among themselves, read as one: ``CallSpec.reads_rows``): dense rows on both
targets, and on CUDA rows one stride apart too (a slice ``x[:, :n]`` of wider rows, read in place
by a kernel of that stride); every other layout runs the kernels of :mod:`.strided`: on CUDA sm_90+
tiles in shared memory over a leading dim of a contiguous input (:mod:`.smem_cols`), else a
column a thread.
"""

from __future__ import annotations

import functools
import os

import torch

import dispatch
from dispatch.backend import (LONG_ROW, BackendInfo, CallSpec, Config, Failure, TuneError, TuneResult, TuneSpace,
                              Verdict, dist_version, dtype_name, env_flag, hookimpl, measure, pick_winner, source_hash)

NAME = "tilelang"
OPS = ("softmax", "log_softmax", "logsumexp", "rms_norm", "layer_norm")  # the ops these kernels implement
NORM_OPS = ("rms_norm", "layer_norm")  # served by dispatch_tilelang.norms
# The TileLang versions served are the ``tilelang`` extra's range in pyproject.toml (0.1.11/0.1.12
# bind signatures before configs: the seeding in native_tune makes them tune too).

#: On the GPU every candidate is compiled (nvcc, ~3 s each on an H200 host; at once, on a pool):
#: the tune space is the default config's family only, at most this many of it. The spaces are ordered best-first by H200 measurements
#: (benchmarks/results/history/2026-11/tilelang_kernels_h200.md), where tuning within a family gained <= 2%.
MAX_CUDA_CANDIDATES = 2

_KERNEL_MODULES = ("dispatch_tilelang.build", "dispatch_tilelang.cuda_kernels", "dispatch_tilelang.cpu_kernels",
                   "dispatch_tilelang.configs", "dispatch_tilelang._numerics", "dispatch_tilelang.norms",
                   "dispatch_tilelang.norm_configs", "dispatch_tilelang.norm_kernels",
                   "dispatch_tilelang.norm_backward",
                   "dispatch_tilelang.strided", "dispatch_tilelang.strided_kernels", "dispatch_tilelang.smem_rows",
                   "dispatch_tilelang.smem_cols", "dispatch_tilelang.smem_norms",
                   "dispatch_tilelang.smem_norm_backward", "dispatch_tilelang.column_sums")


@functools.lru_cache(maxsize=None)
def _quiet_compiler_logs() -> None:
    """TileLang logs every compile at INFO on its own handler; keep users' output to warnings.

    Once a process, after TileLang's import (which sets its level to INFO): a user who wants the
    compile lines back calls ``tilelang.set_log_level("INFO")`` after the first call.
    """
    import logging

    logging.getLogger("tilelang").setLevel(logging.WARNING)


def _target(spec: CallSpec) -> str | None:
    return {"cuda": "cuda", "cpu": "c"}.get(spec.device.type)


@hookimpl
def dispatch_backend_info() -> BackendInfo:
    version = dist_version("tilelang")
    available = Verdict.yes() if version else Verdict.no("tilelang is not installed (pip install "
                                                         "'dispatch-ops[tilelang]')")
    return BackendInfo(
        name=NAME, version=dispatch.__version__, ops=OPS,
        priority={"cuda": 20, "cpu": -5},  # on the CPU: single-threaded C, for testing
        # H200, tvm-ffi call: 1.1-1.8 us a dispatched call more than dispatch[torch] back to back at
        # decode shapes (benchmarks/results/current/launch/launch_decode.md; the figure below was
        # measured on a slower host start, 13.5 against torch's 12.5), ~3800 GB/s on bandwidth rows
        # rms_norm/layer_norm: never the estimated-cost choice ("last"), nor under autograd
        # (the backward with a row's chunks in shared memory, sm_90+, took 0.90-1.97x the device time
        # of Triton's whole backward at 1024-262144, bf16 and fp32, from CUDA-graph replays, and a
        # training step 0.95-1.40x with more eager wall time at 7 of 10 shapes:
        # benchmarks/results/current/norms/smem_norm_backward/; rows no config of it holds take the
        # reference's), except layer_norm on card "smem": 2-byte rows longer
        # than 16K in shared memory with >= 512 CTAs, H200 bf16 1990-2460 GB/s at 512x32768 to
        # 64x262144, 6-21% less time than Triton's kernel (1716-2196 there), so ranked above Triton's
        # layer_norm figure (benchmarks/results/current/norms/smem_norms/); on card "smem_walked" (256
        # rows or more of up to 64K, where Triton's chunked walk took less since, Dec 5,
        # norm_configs.smem_card) ranked below it and above torch's; rms_norm's were level with
        # Triton's or behind but at 512x32768, and keep no figure. The smem cards' launch is Triton's
        # norms' 13.0 us: since a norm call's inputs are prepared without reshapes (Dec 6), its kernel
        # on an H100 cost 8.3-13.1 us a back-to-back call against Triton's 11.1-14.7, and a call of
        # layer_norm 64x65536 and 32x262144 forced to it 15.6 / 16.0 us against Triton's 18.8 / 19.3
        # (benchmarks/results/current/norms/smem_norms/host_path/)
        # over a dim that is not unit-stride (a column per thread), bf16 over dim 1 of (B, C, H, W):
        # softmax/log_softmax 1674-1954 GB/s (Triton's 2712-3179), logsumexp 1996-2650 (Triton's 1490-2389
        # then, benchmarks/results/current/layouts/tilelang_dim.md; 1860-3100 since, and ranked above this
        # figure on its card: benchmarks/results/current/layouts/two_tiles/)
        # rows longer than 16K: the register-resident cluster family 1560-2820 GB/s bf16 with many
        # rows, 1600-1650 at odd lengths (2048x30001, 1335x50257, 8192x50257), behind Triton's split
        # rows at every such shape measured (benchmarks/results/current/rows_kernels/odd_rows/); the
        # chunk-in-shared-memory family, the default for aligned 2-byte rows of 16K-256K, 2850-3700
        # (level with Triton or up to 14% ahead, benchmarks/results/current/rows_kernels/smem_rows/).
        # One figure can't tell those apart (fp32 and odd rows keep the first), so it stays the
        # first's; the shipped tables decide the aligned rows they cover
        # over a leading dim of a contiguous input whose inner extent is a whole number of 32 bytes (sm_90+):
        # tiles in shared memory (verdict card "tiles"), bf16 softmax 2130-3500 GB/s at the default
        # (Triton's strided kernel 1790-3490), logsumexp level with Triton's or a little behind
        # (benchmarks/results/current/layouts/smem_cols/)
        # rows one stride apart (a slice x[:, :n] of wider rows), up to 16K: softmax 3820 GB/s bf16 (Triton's
        # strided rows 3580), logsumexp 2870 (Triton's 3570) at 16384 rows of 4000 in rows of 4096
        # (benchmarks/results/current/layouts/strided_rows_tilelang.md; verdict card "rows")
        # rows written in another dtype than read (softmax(x, -1, dtype=torch.float32) of bf16 or fp16
        # x): level with Triton at N = 256, 6-10% behind at 1024, 21-24% at 4096 (2800 against 3680 GB/s)
        # (benchmarks/results/current/cast_rows/)
        costs={"cuda": (13.5, 3800.0), "cuda:long": (13.5, 2000.0), "cuda:cast": (13.5, 3000.0),
               "cuda:rms_norm": "last", "cuda:layer_norm": "last",
               "cuda:rms_norm:grad": "last", "cuda:layer_norm:grad": "last",
               "cuda:layer_norm:smem": (13.0, 2900.0), "cuda:layer_norm:smem_walked": (13.0, 2700.0),
               "cuda:softmax:strided": (13.5, 1800.0), "cuda:log_softmax:strided": (13.5, 1800.0),
               "cuda:logsumexp:strided": (13.5, 2300.0), "cuda:tiles": (13.5, 2900.0),
               "cuda:logsumexp:tiles": (13.5, 2300.0), "cuda:rows": (13.5, 3600.0),
               "cuda:logsumexp:rows": (13.5, 2000.0)},
        versions={"tilelang": version or "none", "kernels": source_hash(*_KERNEL_MODULES)},
        description="TileLang programs: row-block, tiled and cluster-split softmax family",
        available=available)


@hookimpl
def dispatch_check(op: str, spec: CallSpec) -> Verdict:
    target = _target(spec)
    if target is None:
        return Verdict.no(f"device {spec.device}: TileLang kernels run on CUDA devices and on the CPU (C target)")
    from .availability import available, supports

    ok, why = available(target)
    if not ok:
        return Verdict.no(why)
    _quiet_compiler_logs()  # after available(), which imports TileLang
    if op in NORM_OPS:
        from . import norms

        return norms.check(spec, target)
    for what, dtype in (("input", spec.dtype), ("output", spec.out_dtype)):
        ok, why = supports(op, dtype, target)
        if not ok:
            return Verdict.no(f"{what} dtype {dtype_name(dtype)}: {why}")
    if spec.out_dtype != spec.dtype and spec.out_dtype.itemsize <= spec.dtype.itemsize:
        return Verdict.no(f"dtype= casts {dtype_name(spec.dtype)} to {dtype_name(spec.out_dtype)}, which rounds: torch "
                          "rounds the input first; these kernels read it at full precision, so only widening casts "
                          "are served")
    if spec.ndim == 0:
        return Verdict.no("a 0-d input has no dim to reduce")
    if not _rows(spec):
        from . import strided

        return strided.check(spec, target)
    stride = _row_stride(spec)
    dims = "" if spec.last_dim_contiguous else f"dims {list(spec.dims)} read as rows of {spec.reduced_size}, "
    if stride:
        # rows of up to LONG_ROW held whole in registers: their own card figures (the register families
        # on longer rows are what "cuda:long" says)
        card = "rows" if target == "cuda" and spec.reduced_size <= LONG_ROW else ""
        return Verdict.yes(f"{dims}rows {stride} elements apart, read in place by the row kernels", card=card)
    return Verdict.yes(f"{dims}read by the row kernels") if dims else Verdict.yes()


def _rows(spec: CallSpec) -> bool:
    """The call reads rows (``CallSpec.reads_rows``: the last, unit-stride dim, or trailing dims
    read as one) of a dense input, or on CUDA rows one stride apart (:func:`_strided_rows`): the
    row kernels'; else the strided ones'. The C kernels take dense rows only (there strided rows
    go to the column kernels)."""
    if not spec.reads_rows:
        return False
    return spec.input.dense or (spec.device.type == "cuda" and _strided_rows(spec) is not None)


def _strided_rows(spec: CallSpec) -> int | None:
    """The stride of rows the CUDA row kernels read in place, or None: the leading dims collapse to
    rows one stride apart without a copy, rows of at least one element that don't overlap (a
    broadcast input, stride 0, or overlapping rows go to the column kernels' verdict)."""
    stride, n = spec.row_stride, spec.reduced_size
    return stride if stride is not None and stride >= n >= 1 else None


def _row_stride(spec: CallSpec) -> int:
    """The row kernels' ``row_stride`` for a call :func:`_rows` gives them: 0 for dense rows, else
    the elements between consecutive rows. A build key: a dense call and a strided one never
    share a kernel."""
    if spec.input.dense:
        return 0
    stride = _strided_rows(spec)
    return 0 if stride is None or stride == spec.reduced_size else int(stride)


def _space(op: str, spec: CallSpec) -> tuple[list[dict], dict]:
    from .configs import config_space, default_config, families

    target, n, stride = _target(spec), spec.reduced_size, _row_stride(spec)
    configs = config_space(op, spec.rows, n, spec.dtype, target, stride, spec.out_dtype)
    default = default_config(op, spec.rows, n, spec.dtype, target, stride, spec.out_dtype)
    if target == "cuda":  # the default's family (it comes first), one compile for all
        configs = next(iter(families(configs, target).values()))[:MAX_CUDA_CANDIDATES]
    return configs, default


@hookimpl
def dispatch_tune_space(op: str, spec: CallSpec) -> TuneSpace:
    from .configs import ALIASES, BUILD_KEYS, TUNABLES

    target = _target(spec)
    if op in NORM_OPS:
        from . import norms

        configs, default = norms.space(spec, target)
        return TuneSpace(configs=configs, default=default, tunables=norms.TUNABLES[target],
                         build_keys=norms.BUILD_KEYS[target])
    if not _rows(spec):
        from . import strided

        return TuneSpace(configs=strided.config_space(spec, target), default=strided.default_config(spec, target),
                         tunables=strided.TUNABLES[target], build_keys=strided.BUILD_KEYS[target])
    configs, default = _space(op, spec)
    return TuneSpace(configs=configs, default=default, tunables=TUNABLES[target], aliases=ALIASES,
                     build_keys=BUILD_KEYS[target])


@hookimpl
def dispatch_kernel(op: str, spec: CallSpec, config) -> object:
    """The kernel of one resolved call: ``run(x)`` for every ``x`` of exactly ``spec``, through the
    compiled kernel's tvm-ffi executable once a first call has checked it (see :mod:`.direct`)."""
    if op in NORM_OPS:
        from . import norms

        return norms.kernel(spec, config, _target(spec))
    if not _rows(spec):
        from . import strided

        return strided.kernel(spec, config, _target(spec))
    from .build import build
    from .direct import call_path

    target, n, m = _target(spec), spec.reduced_size, spec.rows
    cfg = config.as_dict() if config else _space(op, spec)[1]
    compiled = build(op, m, n, spec.dtype, spec.out_dtype, cfg, target, _row_stride(spec))
    return call_path(compiled, m, n, spec.out_shape, spec.ndim == 2 and spec.last_dim_contiguous)


#: Tune the softmax family on CUDA with TileLang's ``autotune`` (which compiles a family's
#: candidates as one module) rather than dispatch's sweep over candidates compiled ahead, all at
#: once, alongside the other backends' (and timed with an early stop): off, the sweep is the
#: faster tune; kept for comparison.
_NATIVE_FLAG = "DISPATCH_TILELANG_NATIVE_AUTOTUNE"
NATIVE_AUTOTUNE = bool(env_flag(os.environ.get(_NATIVE_FLAG), _NATIVE_FLAG))


@hookimpl
def dispatch_precompile(op: str, spec: CallSpec, configs: tuple) -> tuple | None:
    """The softmax family's rows, on CUDA and the C target: every config compiled at once on a
    thread pool (:func:`~dispatch_tilelang.build.build_all`), so that dispatch's sweep only times
    them (and a tune's report splits compile from timing); a config that fails to compile is
    reported and left out. The norms, strided rows, and when TileLang's own autotuner tunes (it
    compiles on its own pool): None."""
    target = _target(spec)
    if target is None or op in NORM_OPS or NATIVE_AUTOTUNE or not _rows(spec):
        return None
    from .build import build_all

    failed = build_all(op, spec.rows, spec.reduced_size, spec.dtype, spec.out_dtype, [c.as_dict() for c in configs],
                       target, device=spec.device, row_stride=_row_stride(spec))
    return tuple(Failure(Config.of(c), why) for c, why in failed)


@hookimpl
def dispatch_native_tune(op: str, spec: CallSpec, space: TuneSpace, example: tuple, settings) -> TuneResult | None:
    """With ``DISPATCH_TILELANG_NATIVE_AUTOTUNE=1``, on CUDA: TileLang's ``autotune`` per kernel
    family (seeded, ``do_not_specialize``), then the families' winners compared by the protocol's
    timer. Otherwise None: dispatch's sweep times what :func:`dispatch_precompile` compiled; so too
    for strided rows (TileLang's autotuner compiles its candidates with a packed ABI that refuses a
    strided input). The norms keep their own native tune on CUDA (None for strided rows too)."""
    target = _target(spec)
    if target != "cuda" or (op not in NORM_OPS and (not NATIVE_AUTOTUNE or not _rows(spec) or _row_stride(spec))):
        return None
    if op in NORM_OPS:
        from . import norms

        return norms.native_tune(spec, space, example, settings)
    from .build import adopt, jit_program, kernel_inputs
    from .configs import families
    from .native_tune import tune_native

    (x,) = example
    n, m = spec.reduced_size, spec.rows
    x2 = x.reshape(m, n)
    reference = {"softmax": torch.softmax, "log_softmax": torch.log_softmax}.get(op)
    out_dtype = spec.out_dtype

    def ref_prog(a):
        if reference is None:
            return torch.logsumexp(a.float(), -1).to(out_dtype)
        return reference(a.float(), -1).to(out_dtype)

    timings, failures = [], []
    for build_keys, family in families([c.as_dict() for c in space.configs], target).items():
        program = jit_program(op, n, spec.dtype, out_dtype, target, dict(build_keys))
        default = space.default.as_dict() if space.default.as_dict() in family else family[0]
        try:
            best, _, tuned = tune_native(program, family, default, space.tunables, space.aliases, settings.warmup,
                                         settings.rep, inputs=kernel_inputs(x2, target), ref_prog=ref_prog,
                                         return_kernel=True)
        except Exception as exc:  # a family that can't be tuned is reported, never compared
            failures += [Failure(Config.of(c), f"{type(exc).__name__}: {exc}") for c in family]
            continue
        adopt(op, n, spec.dtype, out_dtype, best, target, tuned)  # no second compile of the winner
        config = Config.of(best)
        kernel = dispatch_kernel(op, spec, config)
        timings.append(measure(lambda: kernel(x), spec.device, settings, config))
    if not timings:
        raise TuneError(f"TileLang tuned no family for {spec.describe()}:\n"
                        + "\n".join(f"  - {f.config}: {f.reason}" for f in failures))
    win = pick_winner(timings, settings.tie_tolerance)
    return TuneResult(config=win.config, latency_us=win.median_us, spread_us=win.spread_us,
                      timings=tuple(timings), failures=tuple(failures), source="tilelang.autotune")


@hookimpl
def dispatch_backward(op: str, spec: CallSpec):
    """rms_norm/layer_norm: TileLang backward programs (rows that fit one program; dweight/dbias
    from per-program partials reduced in a fixed order). The softmax family: None (the op's backward)."""
    target = _target(spec)
    if op not in NORM_OPS or target is None:
        return None
    from . import norms

    return norms.backward(spec, target)
