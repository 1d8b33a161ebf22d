"""rms_norm and layer_norm on Triton, host side: config spaces, the forward launcher, the backward,
and Triton's native autotuner over the forward kernel (kernels in :mod:`dispatch_triton.norm_kernels`).

A config is a dict: ``BLOCK_N`` (a power of two), ``ROWS`` (rows per program, one-pass only),
``SPLIT`` (programs per row, chunked only; a power of two), ``num_warps``, ``num_stages``. It is
one-pass when ``BLOCK_N`` covers the bucketed row length.
"""

from __future__ import annotations

import threading

import torch
import triton

from dispatch.backend import placeholder

from .norm_kernels import _column_sum, _norm_bwd, _norm_bwd_split, _norm_fwd

NORM_OPS = ("rms_norm", "layer_norm")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAX_N = 1 << 20  # longest row served
_MAX_ONE_PASS = 16384  # longest row held in registers (forward)
_MAX_ONE_PASS_BWD = 8192  # backward holds x, dy, w and two accumulators per element
_MAX_GRID_ROWS = 65535  # grid dim 1 limit: the split path's rows


def _np2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _sms(device: torch.device | None) -> int:
    if device is not None and device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132


def _cfg(block_n: int, rows: int = 1, split: int = 1, warps: int = 4, stages: int = 1) -> dict:
    return {"BLOCK_N": int(block_n), "ROWS": int(rows), "SPLIT": int(split), "num_warps": int(warps),
            "num_stages": int(stages)}


def one_pass(config: dict, n: int) -> bool:
    """Whether ``config`` holds a whole row of ``n`` (its bucket) in registers."""
    return config["BLOCK_N"] >= _np2(max(n, 1))


def config_space(m: int, n: int, dtype: torch.dtype, device: torch.device | None = None) -> list[dict]:
    """Candidate forward configs for ``m`` rows of ``n``, deterministic, by the bucket of ``n``
    (and, for the split path, how many programs ``m`` rows need to fill the device)."""
    np2 = _np2(max(int(n), 1))
    out: list[dict] = []
    if np2 <= _MAX_ONE_PASS:
        bn = max(np2, 16)
        for tile in (1024, 2048, 4096, 8192, 16384):
            if bn <= tile <= max(2048, 2 * bn):
                for per in (8, 16, 32):
                    w = tile // (32 * per)
                    if 1 <= w <= 32:
                        out.append(_cfg(bn, tile // bn, 1, w))
        if not out:
            out.append(_cfg(bn, 1, 1, 1))
    if np2 >= 8192:
        for bn, w in ((2048, 4), (4096, 8)):
            if bn < np2:
                out.append(_cfg(bn, 1, 1, w))
                for split in _splits(m, np2 // bn, device):
                    out.append(_cfg(bn, 1, split, w))
    return out


def _splits(m: int, nchunks: int, device) -> list[int]:
    """Programs per row worth trying: powers of two up to what fills the device twice over."""
    want = max(1, _cdiv(2 * _sms(device), max(m, 1)))
    out, s = [], 2
    while s <= min(nchunks, 2 * _np2(want), 64):
        out.append(s)
        s *= 2
    return out if m <= _MAX_GRID_ROWS else []


def default_config(m: int, n: int, dtype: torch.dtype, device: torch.device | None = None) -> dict:
    """The heuristic pick: whole rows in registers up to 16K elements (several short rows per
    program, 8-16 elements per thread), then 4096-element chunks, cut over enough programs per row
    to fill the device when rows are few."""
    space = config_space(m, n, dtype, device)
    np2 = _np2(max(int(n), 1))
    if np2 <= _MAX_ONE_PASS:
        bn = max(np2, 16)
        if bn <= 512:
            want = _cfg(bn, 1024 // bn, 1, 4)
        else:
            want = _cfg(bn, 1, 1, max(1, min(16, bn // (256 if dtype == torch.float32 else 512))))
    else:
        splits = [c["SPLIT"] for c in space if c["BLOCK_N"] == 4096]
        want = _cfg(4096, 1, max(splits) if m < 2 * _sms(device) else 1, 8)
    return dict(want) if want in space else dict(space[0])


def _check_config(config: dict, n: int) -> None:
    bn, rows, split = int(config["BLOCK_N"]), int(config["ROWS"]), int(config["SPLIT"])
    for name, v in (("BLOCK_N", bn), ("ROWS", rows), ("SPLIT", split)):
        if v < 1 or v & (v - 1):
            raise ValueError(f"config {name} must be a power of two (got {v}) in {config}")
    if rows > 1 and bn < n:
        raise ValueError(f"config ROWS={rows} packs whole rows: BLOCK_N={bn} must be >= N={n}")


class NormLauncher:
    """The forward of one norm call shape: ``run(x, weight, bias)`` -> a new output.

    Built once per (op, M, N, dtype, row stride, device, config, weight/bias present): the grid,
    the constexprs and the placeholders for absent weight/bias (cached, of the input's dtype) are
    fixed here; a call allocates the output (and the split path's workspace) and launches.
    """

    def __init__(self, op: str, m: int, n: int, dtype: torch.dtype, row_stride: int, device: torch.device,
                 config: dict, eps: float, has_weight: bool, has_bias: bool, out_shape: tuple[int, ...]):
        if op not in NORM_OPS:
            raise ValueError(f"'op' must be one of {NORM_OPS} (got {op!r})")
        _check_config(config, n)
        anchor = torch.empty(0, device=device)
        device = anchor.device
        self.config = dict(config)
        empty, size = torch.empty, tuple(out_shape)
        if m == 0 or n == 0:
            def run(x, weight=None, bias=None):
                return empty(size, dtype=dtype, device=device)
            self.run = run
            return
        ph = placeholder(anchor, dtype)
        meta = dict(IS_RMS=op == "rms_norm", HAS_WEIGHT=has_weight, HAS_BIAS=has_bias,
                    BLOCK_N=int(config["BLOCK_N"]), ROWS=int(config["ROWS"]), num_warps=int(config["num_warps"]),
                    num_stages=int(config.get("num_stages", 1)))
        ints = (m, n, row_stride, n, float(eps), _np2(n))
        split = int(config["SPLIT"])
        if one_pass(config, n):
            kernel = _norm_fwd[(_cdiv(m, meta["ROWS"]), 1)]
            kw = dict(meta, PHASE=0, ONE_PASS=True, SPLIT=1)
        else:
            kernel = _norm_fwd[(m, 1)]
            kw = dict(meta, PHASE=0, ONE_PASS=False, SPLIT=1)
        if split > 1 and not one_pass(config, n):
            stats, write = _norm_fwd[(m, split)], _norm_fwd[(m, split)]
            kw1, kw2 = dict(meta, PHASE=1, ONE_PASS=False, SPLIT=split), dict(meta, PHASE=2, ONE_PASS=False,
                                                                               SPLIT=split)
            ws_size = 2 * m * split

            def run(x, weight=None, bias=None):
                y = empty(size, dtype=dtype, device=device)
                ws = empty(ws_size, dtype=torch.float32, device=device)
                w = ph if weight is None else weight
                b = ph if bias is None else bias
                stats(x, w, b, y, ws, *ints, **kw1)
                write(x, w, b, y, ws, *ints, **kw2)
                return y
        else:
            def run(x, weight=None, bias=None):
                y = empty(size, dtype=dtype, device=device)
                kernel(x, ph if weight is None else weight, ph if bias is None else bias, y, ph, *ints, **kw)
                return y
        self.run = run


# -- backward -------------------------------------------------------------------------------------

def _dense_rows(t: torch.Tensor, m: int, n: int) -> tuple[torch.Tensor, int]:
    """``t`` and its row stride, if its elements are m rows of n dense elements; else a dense copy."""
    if t.numel() == m * n:
        if t.is_contiguous():
            return t, n
        if t.dim() >= 1:
            try:
                v = t.view(m, n)
            except RuntimeError:
                v = None
            if v is not None and (v.stride(1) == 1 or n <= 1):
                return v, v.stride(0)
    return t.contiguous(), n


def backward_programs(m: int, device: torch.device) -> int:
    """Programs of the backward (rows are dealt out round robin; each keeps a row of partials)."""
    if device.type != "cuda":
        return max(1, min(m, 4))
    return max(1, min(m, 2 * _sms(device)))  # partials: 2 x SMs x N x 4 bytes, small next to 3 x M x N


def backward_split(m: int, n: int, device: torch.device) -> tuple[int, int]:
    """``(row groups, segments per row)`` of the split backward, or ``(0, 0)`` for the one-kernel one.

    Rows too long for one pass and too few to fill the device are cut into segments; row groups
    are kept few (about M / 16), as each holds a row of dweight/dbias partials."""
    programs = 2 * _sms(device) if device.type == "cuda" else 4
    if _np2(max(n, 1)) <= _MAX_ONE_PASS_BWD or m >= programs:
        return 0, 0
    groups = max(1, m // 16)
    split = min(_np2(_cdiv(n, 2048)), 64, _np2(_cdiv(programs, groups)))
    return (groups, split) if split > 1 else (0, 0)


def make_backward(op: str, m: int, n: int, dtype: torch.dtype, row_stride: int, eps: float,
                  has_weight: bool, has_bias: bool, weight_grad: bool = True, bias_grad: bool = True,
                  split: tuple[int, int] | None = None):
    """``backward(grad, input, weight, [bias,] output) -> (dinput, dweight[, dbias])`` for one call shape.

    ``weight_grad``/``bias_grad`` False: that gradient is not wanted (a frozen parameter) and is None.
    ``split``: ``(row groups, segments)`` of the split backward (default: :func:`backward_split`)."""
    is_rms = op == "rms_norm"
    bn_one = max(_np2(max(n, 1)), 16)
    onep = bn_one <= _MAX_ONE_PASS_BWD
    block_n = bn_one if onep else 2048
    warps = max(1, min(16, block_n // 256)) if onep else 8
    split_plan = split

    def backward(grad, x, weight, *rest):
        bias = rest[0] if len(rest) == 2 else None
        want_dw = has_weight and weight_grad and weight is not None
        want_db = has_bias and bias_grad and bias is not None
        device = x.device
        dx = torch.empty(x.shape, dtype=dtype, device=device)
        if m == 0 or n == 0:
            dw = torch.zeros_like(weight) if want_dw else None
            db = torch.zeros_like(bias) if want_db else None
            return (dx, dw, db) if not is_rms else (dx, dw)
        dy, dy_stride = _dense_rows(grad, m, n)
        groups, segments = split_plan if split_plan is not None else backward_split(m, n, device)
        g = groups if segments > 1 else backward_programs(m, device)
        ph32 = placeholder(x, torch.float32)
        pw = torch.empty((g, n), dtype=torch.float32, device=device) if want_dw else ph32
        pb = torch.empty((g, n), dtype=torch.float32, device=device) if want_db else ph32
        w_arg = weight if weight is not None else placeholder(x, dtype)
        flags = dict(IS_RMS=is_rms, HAS_WEIGHT=weight is not None, WANT_DW=want_dw, WANT_DB=want_db)
        if segments > 1:
            ws = torch.empty(m * segments * 4, dtype=torch.float32, device=device)
            for phase in (1, 2, 3):
                _norm_bwd_split[(g, segments)](x, w_arg, dy, dx, pw, pb, ws, m, n, row_stride, dy_stride, n,
                                               float(eps), PHASE=phase, BLOCK_N=2048, SPLIT=segments, num_warps=8,
                                               **flags)
        else:
            _norm_bwd[(g,)](x, w_arg, dy, dx, pw, pb, m, n, row_stride, dy_stride, n, float(eps),
                            ONE_PASS=onep, BLOCK_N=block_n, num_warps=warps, **flags)
        dw = _reduce(pw, weight) if want_dw else None
        db = _reduce(pb, bias) if want_db else None
        return (dx, dw) if is_rms else (dx, dw, db)

    return backward


def _reduce(partials: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    g, n = partials.shape
    out = torch.empty(like.shape, dtype=like.dtype, device=like.device)
    bn = min(256, max(16, _np2(n)))
    _column_sum[(_cdiv(n, bn),)](partials, out, g, n, BLOCK_G=8, BLOCK_N=bn, num_warps=4)
    return out


# -- Triton's native autotuner over the forward ---------------------------------------------------

_AUTOTUNED: dict = {}
_LOCK = threading.Lock()


def _to_triton(c: dict) -> triton.Config:
    return triton.Config({"BLOCK_N": c["BLOCK_N"], "ROWS": c["ROWS"]}, num_warps=c["num_warps"],
                         num_stages=c["num_stages"])


def config_from_triton(cfg: triton.Config) -> dict:
    """The config dict of a ``triton.Config`` built here (an autotuner's winner)."""
    return _cfg(cfg.kwargs["BLOCK_N"], cfg.kwargs["ROWS"], 1, cfg.num_warps, cfg.num_stages)


def _universe() -> list[dict]:
    seen: dict[tuple, dict] = {}
    for k in range(0, 21):
        for c in config_space(1 << 20, 1 << k, torch.float32):
            if c["SPLIT"] == 1:
                seen.setdefault(tuple(sorted(c.items())), c)
    return list(seen.values())


def autotuned(do_bench=None):
    """``_norm_fwd`` under ``triton.autotune`` (one per ``do_bench``): one launch per call, configs of
    one program per row (``SPLIT`` 1), pruned per launch to the row length's bucket.

    ``key`` is ``N_BUCKET`` alone (Triton adds every tensor argument's dtype): ``HAS_WEIGHT``,
    ``HAS_BIAS`` and ``IS_RMS`` stay out of it, and :func:`run_autotuned` passes a placeholder of the
    input's dtype for an absent weight or bias, so calls with and without them share one entry.
    """
    fn = _AUTOTUNED.get(do_bench)
    if fn is None:
        with _LOCK:
            fn = _AUTOTUNED.get(do_bench)
            if fn is None:
                def prune(configs, named_args, **kwargs):
                    n = int(named_args["N"])
                    onep = _np2(n) <= _MAX_ONE_PASS  # what run_autotuned passes as ONE_PASS
                    allowed = {(c["BLOCK_N"], c["ROWS"], c["num_warps"])
                               for c in config_space(int(named_args["M"]), n, named_args["x_ptr"].dtype)
                               if c["SPLIT"] == 1 and one_pass(c, n) == onep}
                    kept = [c for c in configs if (c.kwargs["BLOCK_N"], c.kwargs["ROWS"], c.num_warps) in allowed]
                    if not kept:
                        raise ValueError(f"no norm config fits N={n}")
                    return kept

                fn = triton.autotune(configs=[_to_triton(c) for c in _universe()], key=["N_BUCKET"],
                                     prune_configs_by={"early_config_prune": prune}, do_bench=do_bench)(_norm_fwd)
                _AUTOTUNED[do_bench] = fn
    return fn


def run_autotuned(op: str, x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                  eps: float = 1e-5, do_bench=None) -> torch.Tensor:
    """``op`` over the rows of a 2-D ``x`` (unit stride along a row), the config chosen by Triton's autotuner."""
    if op not in NORM_OPS:
        raise ValueError(f"'op' must be one of {NORM_OPS} (got {op!r})")
    if x.dim() != 2 or (x.shape[1] > 1 and x.stride(1) != 1):
        raise ValueError(f"'x' must be 2-D with unit stride along its rows (got shape {tuple(x.shape)}, "
                         f"strides {x.stride()})")
    m, n = x.shape
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return y
    kernel = autotuned(do_bench)
    ph = placeholder(x, x.dtype)

    def grid(meta):
        return (_cdiv(m, meta["ROWS"]) if meta["ONE_PASS"] else m, 1)

    # ONE_PASS follows from the config: every candidate of a bucket agrees (pruned to it)
    onep = _np2(n) <= _MAX_ONE_PASS
    kernel[grid](x, ph if weight is None else weight, ph if bias is None else bias, y, ph, m, n, x.stride(0), n,
                 float(eps), _np2(n), IS_RMS=op == "rms_norm", HAS_WEIGHT=weight is not None,
                 HAS_BIAS=bias is not None, PHASE=0, ONE_PASS=onep, SPLIT=1)
    return y


# -- the backend's hooks for the norm ops -------------------------------------------------------

def check(spec) -> "Verdict":
    """Can the Triton kernels serve this norm call? (called by the backend's ``dispatch_check``)."""
    from dispatch.backend import Verdict, dtype_name, norm_dims_contiguous, norm_row_stride, norm_size

    if spec.dtype not in DTYPES:
        return Verdict.no(f"input dtype {dtype_name(spec.dtype)} not served; float32, float16 and bfloat16 are")
    for t in spec.tensors[1:]:
        if t.present and t.dtype != spec.dtype:
            return Verdict.no(f"{t.name} dtype {dtype_name(t.dtype)} differs from the input's "
                              f"({dtype_name(spec.dtype)}); pass them in one dtype")
        if t.present and not t.dense:
            return Verdict.no(f"{t.name} must be contiguous (got strides {list(t.stride)})")
    n = norm_size(spec)
    if n > MAX_N:
        return Verdict.no(f"normalized size {n} > {MAX_N}, the longest row these kernels hold")
    if not norm_dims_contiguous(spec):
        return Verdict.no(f"the normalized dims {list(spec.normalized_shape)} must be dense (row-major, unit "
                          f"stride last); got strides {list(spec.stride)}")
    if norm_row_stride(spec) is None:
        return Verdict.no(f"the leading dims (shape {list(spec.shape)}, strides {list(spec.stride)}) don't "
                          "collapse to rows with one stride without a copy")
    return Verdict.yes()



def _shape(spec) -> tuple[int, int]:
    from dispatch.backend import norm_rows, norm_size

    return norm_rows(spec), norm_size(spec)


def tune_space(spec):
    from dispatch.backend import TuneSpace

    m, n = _shape(spec)
    configs = config_space(m, n, spec.dtype, spec.device)
    default = default_config(m, n, spec.dtype, spec.device)
    return TuneSpace(configs=configs, default=default, tunables=tuple(default))


def kernel(spec, config):
    from dispatch.backend import norm_eps, norm_row_stride

    m, n = _shape(spec)
    cfg = dict(config.as_dict()) if config else default_config(m, n, spec.dtype, spec.device)
    present = [t.present for t in spec.tensors[1:]] + [False]
    return NormLauncher(spec.op, m, n, spec.dtype, norm_row_stride(spec), spec.device, cfg, norm_eps(spec),
                        present[0], present[1], spec.out_shape).run


def backward(spec):
    from dispatch.backend import norm_eps, norm_row_stride

    m, n = _shape(spec)
    present = [t.present for t in spec.tensors[1:]] + [False]
    wanted = [t.requires_grad for t in spec.tensors[1:]] + [False]
    return make_backward(spec.op, m, n, spec.dtype, norm_row_stride(spec), norm_eps(spec), present[0], present[1],
                         wanted[0], wanted[1])
