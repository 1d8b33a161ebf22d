"""The Triton backend: softmax, log_softmax and logsumexp over any single dim, and rms_norm/layer_norm.

Runs on CUDA devices, and on the CPU under the Triton interpreter (``TRITON_INTERPRET=1``, set
before triton is imported). Kernels are tuned through dispatch's protocol: the tune space comes
from :mod:`dispatch_triton.configs` (pruned for the call's rows); on the GPU every candidate is
compiled at once on a thread pool (``dispatch_precompile``), then dispatch's sweep times them
(:mod:`dispatch_triton.autotune` holds the ``triton.autotune`` wrapper, for direct use). The kernel itself is in :mod:`dispatch_triton.jit`, its launches
in :mod:`dispatch_triton.launch`; reductions over a dim that is not unit-stride in
:mod:`dispatch_triton.strided`.
"""

from __future__ import annotations

import functools
import math
import os

import torch

import dispatch
from dispatch.backend import (BackendInfo, CallSpec, Config, Timing, TuneResult, TuneSpace, Verdict,
                              contiguous_strides, dist_version, do_bench, env_flag, hookimpl, measure, row_view,
                              source_hash)

NAME = "triton"
OPS = ("softmax", "log_softmax", "logsumexp", "rms_norm", "layer_norm")  # the ops these kernels implement
NORM_OPS = ("rms_norm", "layer_norm")  # served by dispatch_triton.norms
SERVED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

_KERNEL_MODULES = ("dispatch_triton.jit", "dispatch_triton.row_math", "dispatch_triton.lse_chunks",
                   "dispatch_triton.exchange", "dispatch_triton.configs",
                   "dispatch_triton.launch", "dispatch_triton.buffers", "dispatch_triton.autotune",
                   "dispatch_triton.norms", "dispatch_triton.norm_configs", "dispatch_triton.norm_kernels",
                   "dispatch_triton.norm_stats", "dispatch_triton.norm_backward", "dispatch_triton.norm_backward_plan",
                   "dispatch_triton.norm_backward_kernels", "dispatch_triton.norm_backward_coop",
                   "dispatch_triton.strided", "dispatch_triton.strided_configs", "dispatch_triton.strided_jit",
                   "dispatch_triton.strided_steps", "dispatch_triton.window")


def _interpreting() -> bool:
    """Whether Triton runs kernels in its interpreter: ``TRITON_INTERPRET`` read as Triton reads it."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on")


def _availability(triton_version: str | None) -> Verdict:
    if triton_version is None:
        return Verdict.no("triton is not installed (pip install 'dispatch-ops[triton]')")
    if not torch.cuda.is_available() and not _interpreting():
        return Verdict.no("no CUDA device, and the Triton interpreter is off "
                          "(set TRITON_INTERPRET=1 before importing triton to run kernels on the CPU)")
    return Verdict.yes()


@hookimpl
def dispatch_backend_info() -> BackendInfo:
    triton_version = dist_version("triton")
    return BackendInfo(
        name=NAME, version=dispatch.__version__, ops=OPS,
        priority={"cuda": 30, "cpu": -10},  # on the CPU it is an interpreter: correct, not fast
        # H200, direct launch: 0.3-1.0 us a dispatched call more than dispatch[torch] back to back at
        # decode shapes, split rows 2-6 us more (benchmarks/results/current/launch/launch_decode.md;
        # the figure below was measured on a slower host start), ~3700 GB/s on bandwidth rows
        # rms_norm/layer_norm forward: 21-25 us at 16M elements bf16 (88-98% of a same-size copy,
        # 1.2-2x torch's speed, 4-14x on long rows), and 2-16% less per call than torch's own at
        # decode shapes (benchmarks/results/current/launch/launch_norms.md). Their training step
        # (forward and autograd.grad, bf16) takes 26-90% less device time than torch's (1400-1500 GB/s
        # of forward bytes at rows of 4096) but, through a Python autograd.Function, about 190 us of
        # host time: torch's step is cheaper up to ~170 MB of forward bytes, Triton's above
        # (launch_norms_grad.md, launch_norms_grad_large.md there)
        # logsumexp over a dim that is not unit-stride, bf16: 1860-3100 GB/s over dim 1 of (B, C, H, W)
        # (wide blocks of 256 columns, 128 where the inner dim is 128 wide; R of up to 128 in two tiles),
        # 1376 over dim 0; the figure sits above TileLang's: Triton's kernel was the faster on every
        # dim-1 case of the layouts bench but one, every other row of 32x512x64x128 (59.5 against 56.5
        # us in bf16, 77.9 against 73.5 in fp32), and fp32 over 32x1024x64x64 (136.0 against 131.6)
        # (benchmarks/results/current/layouts/two_tiles/)
        # rows longer than 16K, split over programs: 2600-3300 GB/s bf16 (odd lengths 2600-2800),
        # 3000-3600 fp32, with the split launch's extra host time
        # (benchmarks/results/current/rows_kernels/odd_rows/, long_rows_final.md); that host time, a
        # call back to back against TileLang's long-row call: 1.1-1.9 us more on an H200
        # (dispatch/tables/nvidia-h200-rows.json), 0-0.6 us on an H100 (rows_kernels/few_long_h100/)
        # over a dim that is not the last, bf16 softmax: 1790-3490 GB/s (benchmarks/results/current/layouts/smem_cols/)
        costs={"cuda": (13.5, 3700.0), "cuda:long": (15.0, 3000.0), "cuda:strided": (13.5, 2300.0),
               "cuda:rms_norm": (13.0, 2900.0), "cuda:layer_norm": (13.0, 2800.0),
               "cuda:rms_norm:grad": (220.0, 1450.0), "cuda:layer_norm:grad": (220.0, 1400.0),
               "cuda:logsumexp:strided": (13.5, 2400.0)},
        versions={"triton": triton_version or "none", "kernels": source_hash(*_KERNEL_MODULES),
                  "interpreter": "1" if _interpreting() else "0"},
        description="Triton kernels: multi-row, one-pass and split-row/online softmax family; "
                    "any single dim read in place",
        available=_availability(triton_version))


def rows_view_stride(spec: CallSpec) -> int | None:
    """The row stride if the kept dims of ``spec`` (a call that reads rows) collapse to rows
    without a copy, else None (``CallSpec.row_stride``)."""
    return spec.row_stride


def _row_kernel(spec: CallSpec) -> bool:
    """Whether the row kernel is the one for ``spec``: the last, unit-stride dim (refused where the
    leading dims don't collapse to rows), or trailing dims read as rows whose kept dims collapse
    (else the strided kernel's, which takes kept dims in up to three groups)."""
    return spec.reads_rows and (spec.last_dim_contiguous or rows_view_stride(spec) is not None)


@hookimpl
def dispatch_check(op: str, spec: CallSpec) -> Verdict:
    if spec.device.type != "cuda" and not (spec.device.type == "cpu" and _interpreting()):
        return Verdict.no(f"device {spec.device}: Triton kernels run on CUDA devices "
                          "(or on the CPU under TRITON_INTERPRET=1)")
    if op in NORM_OPS:
        from . import norms

        return norms.check(spec)
    if spec.dtype not in SERVED_DTYPES:
        return Verdict.no(f"input dtype {spec.dtype} not served; float32, float16 and bfloat16 are")
    if spec.out_dtype not in SERVED_DTYPES:
        return Verdict.no(f"output dtype {spec.out_dtype} not served; float32, float16 and bfloat16 are")
    if spec.ndim == 0:
        return Verdict.no("0-d input: nothing to reduce over")
    if not _row_kernel(spec):
        return _strided_verdict(op, spec)
    if rows_view_stride(spec) is None:
        return Verdict.no(f"the leading dims (strides {list(spec.stride[:-1])}) don't collapse to rows "
                          "without a copy")
    return Verdict.yes() if spec.last_dim_contiguous else Verdict.yes(
        f"serves this call (the row kernel: dims {list(spec.dims)} read as rows of {spec.reduced_size})")


def _strided_plan(op: str, spec: CallSpec):
    """The (outer, R, inner) plan of a call that is not a reduction over the last unit-stride dim
    (:mod:`dispatch_triton.strided`), for logsumexp over dims that don't collapse the plan of its
    steps (:mod:`dispatch_triton.strided_steps`), or the reason there is none."""
    from .strided import plan

    p = plan(op, spec.shape, spec.stride, spec.dims)
    if isinstance(p, str) and op == "logsumexp" and len(spec.dims) > 1:
        from .strided_steps import step_plan

        return step_plan(spec.shape, spec.stride, spec.dims)
    return p


def _strided_verdict(op: str, spec: CallSpec) -> Verdict:
    if spec.out_dtype != spec.dtype and spec.out_dtype.itemsize <= spec.dtype.itemsize:
        return Verdict.no(f"dtype= casts {spec.dtype} to {spec.out_dtype}, which rounds: torch rounds the input "
                          f"first, which the strided kernels don't (the row kernel does: over the last dim)")
    p = _strided_plan(op, spec)
    if isinstance(p, str):
        return Verdict.no(f"dims {list(spec.dims)} of shape {list(spec.shape)}, strides {list(spec.stride)}: {p}")
    from .strided_steps import StepPlan

    if isinstance(p, StepPlan):
        kinds = "; ".join(f"step {i + 1}: {'the row kernel' if row_view(st.plan) else 'the strided kernel'}"
                          for i, st in enumerate(p.steps))
        return Verdict.yes(f"serves this call (logsumexp in {len(p.steps)} steps, each over reduced dims that "
                           f"collapse; the first reads the input in place; {kinds})")
    return Verdict.yes("serves this call (strided kernel: reduced dim read in place)")


def _rows(spec: CallSpec) -> tuple[int, int]:
    """(rows, row length) of a call that reads rows (its reduced dims read as one)."""
    return spec.rows, spec.reduced_size


@hookimpl
def dispatch_tune_space(op: str, spec: CallSpec) -> TuneSpace:
    if op in NORM_OPS:
        from . import norms

        return norms.tune_space(spec)
    if not _row_kernel(spec):
        from . import strided

        from .strided_steps import StepPlan

        p = _strided_plan(op, spec)
        rows = p.first_rows if isinstance(p, StepPlan) else None
        if rows:  # a first step of rows: the row kernel's configs
            return _row_tune_space(op, rows[0], rows[1], spec.dtype)
        first = p.first if isinstance(p, StepPlan) else p  # in steps: the first step's config is tuned
        itemsize = spec.dtype.itemsize
        default = strided.default_config(first, spec.device, itemsize)
        return TuneSpace(configs=strided.config_space(first, spec.device, itemsize), default=default,
                         tunables=strided.TUNABLES)
    m, n = _rows(spec)
    return _row_tune_space(op, m, n, spec.dtype)


def _row_tune_space(op: str, m: int, n: int, dtype: torch.dtype) -> TuneSpace:
    from .configs import config_space, default_config, prune

    default = default_config(op, m, n, dtype)
    configs, pruned = prune(op, m, n, dtype, config_space(op, m, n, dtype), default)
    return TuneSpace(configs=configs, default=default, tunables=tuple(default),
                     pruned=[(Config.of(c), why) for c, why in pruned])


@hookimpl
def dispatch_kernel(op: str, spec: CallSpec, config) -> object:
    """The kernel of one resolved call: ``run(x)`` for every ``x`` of exactly ``spec``.

    Everything that depends on the spec and the config (checks, grid, launch arguments) is done
    here, once, by a :class:`~dispatch_triton.launch.Launcher`; a call allocates the output in
    its final shape and launches. ``x`` itself is handed to the kernel: its leading dims
    collapse to rows at the spec's row stride (``dispatch_check`` made sure), so no view is taken.
    """
    if op in NORM_OPS:
        from . import norms

        return norms.kernel(spec, config)
    from .configs import default_config
    from .launch import Launcher

    if not _row_kernel(spec):
        from . import strided

        from .strided_steps import StepLauncher, StepPlan

        p = _strided_plan(op, spec)
        if isinstance(p, StepPlan):
            cfg = dict(config.as_dict()) if config else None  # None: the first step's default
            return StepLauncher(p, spec.dtype, spec.out_dtype, spec.out_shape, spec.device, cfg).run
        cfg = dict(config.as_dict()) if config else strided.default_config(p, spec.device, spec.dtype.itemsize)
        return strided.StridedLauncher(op, p, spec.out_dtype, spec.out_shape, spec.device, cfg).run
    m, n = _rows(spec)
    cfg = dict(config.as_dict()) if config else default_config(op, m, n, spec.dtype)
    like_input = (spec.out_dtype == spec.dtype and tuple(spec.out_shape) == tuple(spec.shape)
                  and tuple(spec.stride) == contiguous_strides(spec.shape))
    return Launcher(op, m, n, spec.dtype, spec.out_dtype, rows_view_stride(spec), spec.device, cfg,
                    out_shape=spec.out_shape, like_input=like_input).run


#: Tune the softmax family on CUDA with ``triton.autotune`` (candidates compiled as it reaches
#: them) rather than dispatch's sweep (candidates compiled ahead, all at once, and timed with an
#: early stop): off, the sweep is the faster tune; kept for comparison.
_NATIVE_FLAG = "DISPATCH_TRITON_NATIVE_AUTOTUNE"
NATIVE_AUTOTUNE = bool(env_flag(os.environ.get(_NATIVE_FLAG), _NATIVE_FLAG))


@hookimpl
def dispatch_precompile(op: str, spec: CallSpec, configs: tuple) -> tuple | None:
    """On CUDA, every config's kernels compiled (and loaded) at once on a thread pool, before any
    is timed: a :class:`~dispatch_triton.launch.Launcher` per config, whose ``compile()`` takes
    the JIT's warm-up path with stand-ins of the launch's tensors. A config that fails to compile
    is reported (and left out of the tune). Under the interpreter there is nothing to compile: None
    (nor for the norms and the strided kernel, which compile as they are timed, nor when
    ``triton.autotune`` tunes: ``DISPATCH_TRITON_NATIVE_AUTOTUNE=1``)."""
    if (spec.device.type != "cuda" or _interpreting() or op in NORM_OPS or not _row_kernel(spec)
            or NATIVE_AUTOTUNE):
        return None
    from dispatch.backend import compile_all

    from .jit import _softmax_kernel

    with torch.cuda.device(spec.device):  # the JIT's per-device cache made here, not raced for by the pool
        caches = getattr(_softmax_kernel, "device_caches", None)
        if caches is not None:
            caches[torch.cuda.current_device()]

    def one(config) -> None:
        with torch.cuda.device(spec.device):
            kernel = dispatch_kernel(op, spec, config)
            launcher = getattr(kernel, "launcher", None)
            if launcher is not None:
                launcher.compile()

    return compile_all(configs, one).failures


_BENCHES: dict[tuple[int, int], object] = {}


def _bench(settings) -> object:
    """One do_bench per (warmup, rep), so Triton's autotuner cache is shared between calls."""
    key = (settings.warmup, settings.rep)
    if key not in _BENCHES:
        _BENCHES[key] = functools.partial(do_bench, warmup=settings.warmup, rep=settings.rep)
    return _BENCHES[key]


@hookimpl
def dispatch_native_tune(op: str, spec: CallSpec, space: TuneSpace, example: tuple, settings) -> TuneResult | None:
    """None: dispatch's sweep times the candidates that :func:`dispatch_precompile` compiled. With
    ``DISPATCH_TRITON_NATIVE_AUTOTUNE=1``, on CUDA, Triton's own autotuner sweeps the space instead
    (key: the bucketed row length and the dtypes; absent optional tensors get dtype-matched
    placeholders)."""
    if not NATIVE_AUTOTUNE or spec.device.type != "cuda" or op in NORM_OPS or not _row_kernel(spec):
        return None  # norms and the strided kernel are swept by dispatch (norms include the split path)
    from .autotune import autotuned, config_from_triton, run_autotuned

    m, n = _rows(spec)
    (x,) = example
    bench = _bench(settings)
    x2 = x.as_strided((m, n), (rows_view_stride(spec), 1))
    run_autotuned(op, x2, spec.out_dtype, do_bench=bench)
    tuner = autotuned(op, bench)
    best = Config.of(config_from_triton(tuner.best_config))
    timed = {c: float(t[0] if isinstance(t, (list, tuple)) else t) * 1e3
             for c, t in (getattr(tuner, "configs_timings", None) or {}).items()}
    # (Triton times a config that failed to run as inf: a failure, not a time)
    timings = tuple(Timing(Config.of(config_from_triton(c)), us) for c, us in timed.items() if math.isfinite(us))
    kernel = dispatch_kernel(op, spec, best)
    measured = measure(lambda: kernel(x), spec.device, settings, best)  # the winner, timed by the protocol
    return TuneResult(config=best, latency_us=measured.median_us, spread_us=measured.spread_us,
                      timings=timings or (measured,), source="triton.autotune")


@hookimpl
def dispatch_backward(op: str, spec: CallSpec):
    """rms_norm/layer_norm: Triton backward kernels (dx per row, dweight/dbias in two deterministic
    stages). The softmax family: None (the op's declared backward)."""
    if op not in NORM_OPS:
        return None
    from . import norms

    if not norms.check(spec):
        return None
    return norms.backward(spec)
