"""rms_norm and layer_norm on TileLang, host side: verdicts, compiled kernels, their calls and tuning.

A config is a dict. C target: ``block_m`` (tunable JIT parameter) and ``tile_n`` (build key: 0 =
whole row in one tile). CUDA: ``block_m`` and ``threads`` (tunable JIT parameters) and ``tile_n``
(build key: 0 = whole rows in registers, up to 32768 elements; longer rows, up to ``MAX_N``: a CTA
per row walking it in ``tile_n`` chunks, ``block_m`` 1). With ``smem: 1`` (and ``cluster``, build
keys present only there; sm_90+, dense rows a whole number of 16-byte vectors): a row in
``cluster`` chunks of ``tile_n`` held in shared memory, one CTA each, exchanging their partial
statistics in the cluster (:mod:`.smem_norms`); ``tile_n`` is then the cluster's share of the
call's row, whatever row the config was chosen on. Rows may be ``row_stride`` elements apart
(a slice of wider rows): they are read in place, through a strided view, by a kernel of that
stride. Programs are in :mod:`dispatch_tilelang.norm_kernels` and :mod:`.smem_norms`; the config
spaces and defaults in :mod:`.norm_configs` (their names are this module's too).
"""

from __future__ import annotations

import math
import threading

import torch

from .norm_configs import (  # noqa: F401 - the config spaces, named here too
    CUDA_MAX_N,
    CUDA_TILES,
    MAX_N,
    SMEM_MIN_N,
    config_space,
    default_config,
    fit,
    smem_card,
    smem_config,
    smem_refusal,
)

NORM_OPS = ("rms_norm", "layer_norm")
DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
TUNABLES = {"cuda": ("block_m", "threads"), "c": ("block_m",)}
_F32_MAX = torch.finfo(torch.float32).max
BUILD_KEYS = {"cuda": ("tile_n", "cluster", "smem"), "c": ("tile_n",)}


def check(spec, target: str):
    """Can the TileLang norm kernels serve this call on ``target``? A verdict with a reason."""
    from dispatch.backend import Verdict, dtype_name, norm_eps, norm_layout_refusal, norm_size

    if spec.dtype not in DTYPES:
        return Verdict.no(f"input dtype {dtype_name(spec.dtype)} not served; float32, float16 and bfloat16 are")
    if spec.out_dtype != spec.dtype:
        return Verdict.no(f"a {dtype_name(spec.dtype)} input with a {dtype_name(spec.out_dtype)} result (read in "
                          "the kernel under autocast): these kernels write the input's dtype")
    for t in spec.tensors[1:]:
        if t.present and (t.dtype != spec.dtype or not t.dense):
            return Verdict.no(f"{t.name} must be contiguous and of the input's dtype ({dtype_name(spec.dtype)}); "
                              f"got {dtype_name(t.dtype)}, strides {list(t.stride)}")
    eps = float(norm_eps(spec))
    if math.isfinite(eps) and abs(eps) > _F32_MAX:  # a float32 literal in the kernel: TVM refuses to build it
        return Verdict.no(f"eps={eps!r} is beyond float32's range, and these kernels hold eps as a float32 "
                          "constant; torch's kernel serves it")
    n = norm_size(spec)
    if n > MAX_N:
        return Verdict.no(f"normalized size {n} > {MAX_N}, the longest row these kernels walk")
    refusal = norm_layout_refusal(spec)
    if refusal is not None:
        return Verdict.no(refusal)
    from dispatch.backend import norm_row_stride, norm_rows

    if norm_row_stride(spec) == 0 and norm_rows(spec) > 1:
        return Verdict.no("rows that share memory (row stride 0, an expanded input) are not served: "
                          "these kernels read rows one stride > 0 apart")
    if target == "cuda":

        config = space(spec, target)[1]
        card = smem_card(norm_rows(spec), n, config, DTYPES[spec.dtype])
        if config.get("smem") == 1:
            return Verdict.yes(f"rows in shared memory, {config['cluster']} CTAs a row", card=card)
    return Verdict.yes()


def space(spec, target: str) -> tuple[list[dict], dict]:
    """The call's config space and its default (the space's first)."""
    from dispatch.backend import norm_rows, norm_size

    configs = config_space(norm_rows(spec), norm_size(spec), target, DTYPES[spec.dtype], row_stride(spec))
    return configs, dict(configs[0])


def row_stride(spec) -> int:
    """The kernels' ``row_stride`` for ``spec``: 0 for dense rows (or a single row), else the
    elements between consecutive rows."""
    from dispatch.backend import norm_row_stride, norm_rows, norm_size

    stride, n = norm_row_stride(spec), norm_size(spec)
    return 0 if stride is None or stride == n or norm_rows(spec) <= 1 else int(stride)


# -- compiled kernels ---------------------------------------------------------------------------

_BUILT: dict[tuple, object] = {}
_LOCK = threading.Lock()


def _program(op, n, dtype, has_weight, has_bias, eps, target, stride, config):
    """The ``@tilelang.jit`` program of ``config``'s family (its build keys)."""
    from . import norm_kernels

    tile_n = int(config.get("tile_n", 0))
    if target == "c":
        return norm_kernels.cpu_program(op, n, dtype, has_weight, has_bias, eps, tile_n, stride)
    from .build import cuda_arch

    arch = cuda_arch()
    if config.get("smem") == 1:
        from . import smem_norms

        reason = smem_refusal(n, dtype, stride, config)
        if reason is not None:
            raise ValueError(reason)
        return smem_norms.program(op, n, dtype, has_weight, has_bias, eps, tile_n, int(config["cluster"]), arch)
    if tile_n > 0:
        return norm_kernels.cuda_chunked_program(op, n, dtype, has_weight, has_bias, eps, tile_n, arch, stride)
    return norm_kernels.cuda_program(op, n, dtype, has_weight, has_bias, eps, arch, stride)


def build(op: str, n: int, dtype: str, has_weight: bool, has_bias: bool, eps: float, target: str, stride: int,
          config: dict):
    """The compiled kernel of one family and config (cached in-process; TileLang caches on disk)."""
    key = (op, n, dtype, has_weight, has_bias, eps, target, stride, tuple(sorted(config.items())))
    kernel = _BUILT.get(key)
    if kernel is None:
        with _LOCK:
            kernel = _BUILT.get(key)
            if kernel is None:
                jit = {k: v for k, v in config.items() if k in TUNABLES[target]}
                kernel = _program(op, n, dtype, has_weight, has_bias, eps, target, stride, config)(**jit)
                _BUILT[key] = kernel
    return kernel


def build_all(op: str, n: int, dtype: str, has_weight: bool, has_bias: bool, eps: float, target: str, stride: int,
              configs: list[dict], workers: int | None = None) -> list[tuple[dict, str]]:
    """Build every config at once, the compiles overlapping on a thread pool
    (:func:`dispatch_tilelang.build.compile_program`); the kernels land where :func:`build` finds
    them. Returns ``(config, reason)`` for each config that failed."""
    from dispatch.backend import Config, compile_all

    from .build import compile_program

    parts = (op, n, dtype, has_weight, has_bias, eps, target, stride)

    def one(config: Config) -> None:
        cfg = config.as_dict()
        if (*parts, tuple(sorted(cfg.items()))) in _BUILT:
            return
        jit = {k: v for k, v in cfg.items() if k in TUNABLES[target]}
        adopt(parts, cfg, compile_program(lambda: _program(*parts, cfg), jit))

    report = compile_all([Config.of(c) for c in configs], one, workers)
    return [(f.config.as_dict(), f.reason) for f in report.failures]


def adopt(key_parts: tuple, config: dict, kernel) -> None:
    """Keep a kernel compiled by TileLang's autotuner as the build of ``config``."""
    _BUILT.setdefault((*key_parts, tuple(sorted(config.items()))), kernel)


def _parts(spec, target: str) -> tuple:
    from dispatch.backend import norm_eps, norm_size

    present = [t.present for t in spec.tensors[1:]] + [False]
    return (spec.op, norm_size(spec), DTYPES[spec.dtype], present[0], present[1], float(norm_eps(spec)), target,
            row_stride(spec))


def aligned(t: torch.Tensor) -> torch.Tensor:
    """``t``, or a copy of it where its data pointer is not 16-byte aligned: the CUDA programs load
    and store 16-byte vectors from each tensor's start (a view that starts mid-vector, e.g. rows
    ``x[1:]`` of a flat buffer, would fault); a fresh allocation is aligned, and the copy keeps
    ``t``'s strides (rows of a wider buffer stay that far apart). The user's tensor is never handed
    over misaligned nor written."""
    if not t.data_ptr() & 15:
        return t
    if t.dim() == 2 and not t.is_contiguous():  # strided rows: into rows of the same stride
        m, n = t.shape
        buf = torch.empty((m, t.stride(0)), dtype=t.dtype, device=t.device)[:, :n]
        return buf.copy_(t)
    return t.clone()


def rows_of(x: torch.Tensor, m: int, n: int, stride: int) -> torch.Tensor:
    """``x`` as the (m, n) view the programs take: dense rows, or rows ``stride`` apart (the
    strides a kernel of that stride checks; a single row is given dense strides)."""
    if m > 1 and x.dim() == 2:  # already the rows (of n: the last dim is the one normalized)
        return x
    rows = x.reshape(m, n)  # the leading dims collapse to one stride (the check said so): a view
    return rows.as_strided((m, n), (n, 1)) if m <= 1 and not stride else rows


def kernel(spec, config, target: str):
    """``run(x, weight, bias)`` for calls of ``spec``; on CUDA a misaligned tensor is copied first (:func:`aligned`)."""
    from dispatch.backend import norm_rows, placeholder

    parts = _parts(spec, target)
    n, m = parts[1], norm_rows(spec)
    cfg = fit(n, parts[2], dict(config.as_dict())) if config else default_config(m, n, target, parts[2], parts[-1])
    dtype, out_shape = spec.dtype, spec.out_shape
    if m == 0 or n == 0:
        def run_empty(x, weight=None, bias=None):
            return torch.empty(out_shape, dtype=dtype, device=x.device)
        return run_empty
    compiled = build(*parts, cfg)
    bits = target == "c" and dtype == torch.bfloat16

    cuda, stride = target == "cuda", parts[-1]

    def flat(t, x):  # weight or bias as (n,), or the cached stand-in on x's device
        if t is None:
            return placeholder(x, dtype, (n,))
        return t if t.dim() == 1 else t.reshape(n)

    def prepare(x, weight=None, bias=None):  # host time a call: no reshape of what is already its shape
        args = (rows_of(x, m, n, stride), flat(weight, x), flat(bias, x))
        return (aligned(args[0]), aligned(args[1]), aligned(args[2])) if cuda else args

    if cuda:  # the executable's call once checked (direct.NormCallPath): the adapter's costs host time
        from .direct import NormCallPath

        return NormCallPath(compiled, target, m, n, out_shape, dtype, prepare).run

    def run(x, weight=None, bias=None):
        args = prepare(x, weight, bias)
        if bits:
            return compiled(*(a.view(torch.int16) for a in args)).view(torch.bfloat16).view(out_shape)
        return compiled(*args).view(out_shape)

    return run


def native_tune(spec, space, example, settings):
    """CUDA: TileLang's ``autotune`` over the family (tunables seeded from the default config and kept
    out of specialization by ``tune_native``), the winner timed by the protocol. None for strided
    rows: TileLang's autotuner compiles its candidates with a packed ABI that refuses a strided
    input (dispatch's sweep times those configs instead)."""
    if row_stride(spec):
        return None
    import torch.nn.functional as F

    from dispatch.autotune import Config, TuneResult, measure

    from .native_tune import tune_native

    target = "cuda"
    parts = _parts(spec, target)
    op, n, eps = parts[0], parts[1], parts[5]
    from dispatch.backend import norm_rows

    m = norm_rows(spec)
    x, weight, bias = (list(example) + [None])[:3]
    ph = torch.zeros(n, dtype=spec.dtype, device=x.device)
    inputs = [aligned(rows_of(x, m, n, parts[-1])), ph if weight is None else weight.reshape(n),
              ph if bias is None else bias.reshape(n)]
    has_w, has_b = parts[3], parts[4]

    def ref_prog(a, w, b):
        wf = w.float() if has_w else None
        if op == "rms_norm":
            return F.rms_norm(a.float(), (n,), wf, eps).to(a.dtype)
        return F.layer_norm(a.float(), (n,), wf, b.float() if has_b else None, eps).to(a.dtype)

    default = space.default.as_dict()  # one program: the default's family (its build keys)
    configs = [c.as_dict() for c in space.configs
               if all(c.as_dict().get(k) == default.get(k) for k in BUILD_KEYS[target])]
    program = _program(*parts, default)
    best, _, tuned = tune_native(program, configs, space.default.as_dict(), space.tunables, space.aliases,
                                 settings.warmup, settings.rep, inputs=inputs, ref_prog=ref_prog, return_kernel=True)
    adopt(parts, best, tuned)
    config = Config.of(best)
    run = kernel(spec, config, target)
    measured = measure(lambda: run(*example), spec.device, settings, config)
    return TuneResult(config=config, latency_us=measured.median_us, spread_us=measured.spread_us,
                      timings=(measured,), source="tilelang.autotune")


def backward(spec, target: str):
    """The backward kernel of a norm call: on sm_90+ GPUs, rows that a config of
    :mod:`dispatch_tilelang.smem_norm_backward` holds (a row's chunks in shared memory across a
    cluster; faster than the rows in registers on an H200); else
    :mod:`dispatch_tilelang.norm_backward`'s, or None where its rows don't fit one program (then
    autograd runs through the reference)."""
    from dispatch.backend import norm_rows

    from . import norm_backward, smem_norm_backward

    parts = _parts(spec, target)
    op, n, eps = parts[0], parts[1], parts[5]
    if not check(spec, target):
        return None
    if target == "cuda" and smem_norm_backward.refusal(n, parts[2]) is None:
        return smem_norm_backward.make(op, norm_rows(spec), n, spec.dtype, parts[3], parts[4], eps)
    if not norm_backward.serves(n, target):
        return None
    return norm_backward.make_backward(op, norm_rows(spec), n, spec.dtype, parts[3], parts[4], eps, target)
