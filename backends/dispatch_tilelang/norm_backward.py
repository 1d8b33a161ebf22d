"""rms_norm and layer_norm backward as TileLang programs (C target and CUDA), and the backward they make.

Each program holds ``block_m`` whole rows: it recomputes a row's statistics from ``x``, writes
``dx = rstd * (g - mean(g) - xhat * mean(g * xhat))`` (no ``mean(g)`` term for rms_norm), with
``g = dy * w``, and writes its rows' sums of ``dy * xhat`` and ``dy`` (the partial dweight and
dbias) to its own row of two fp32 partials buffers ``(P, N)``. Stage two (:func:`partials_backward`)
sums the partials over P in a fixed order: deterministic, run to run. Rows must fit one program
(C target: N <= 8192; CUDA: N <= 32 values per thread); longer rows take the reference backward.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.

import functools
import threading

import tilelang
import tilelang.language as T
import torch

from ._numerics import F32
from .norm_kernels import _load, _store, cuda_check, storage_dtype
from .norms import DTYPES, aligned

C_MAX_N = 8192
C_MAX_ELEMS = 16384  # three (block_m, N) fp32 tiles on the stack


@functools.lru_cache(maxsize=None)
def cpu_program(op: str, n_cols: int, dtype: str, has_weight: bool, eps: float):
    """The C-target backward (tunable ``block_m``): ``main(x, w, dy, dx, pw, pb)``, all preallocated."""
    import tilelang.cpu.language as T

    N = n_cols
    xs = storage_dtype(dtype, "c")
    rms = op == "rms_norm"

    @tilelang.jit(target="c", out_idx=None, compile_flags=["-O2"])
    def cpu_norm_bwd(block_m):
        M = T.dynamic("m")
        P = T.dynamic("p")

        @T.prim_func
        def main(x: T.Tensor((M, N), xs), w: T.Tensor((N,), xs), dy: T.Tensor((M, N), xs),
                 dx: T.Tensor((M, N), xs), pw: T.Tensor((P, N), F32), pb: T.Tensor((P, N), F32)):
            with T.Kernel(T.ceildiv(M, block_m)) as bx:
                xt = T.alloc_local((block_m, N), F32)
                gt = T.alloc_local((block_m, N), F32)
                tmp = T.alloc_local((block_m, N), F32)
                red = T.alloc_local((block_m,), F32)
                off = T.alloc_local((block_m,), F32)
                rstd = T.alloc_local((block_m,), F32)
                c1 = T.alloc_local((block_m,), F32)
                c2 = T.alloc_local((block_m,), F32)
                acc = T.alloc_local((2,), F32)
                for i, j in T.grid(block_m, N):
                    xt[i, j] = T.if_then_else(bx * block_m + i < M, _load(x[bx * block_m + i, j], dtype, "c"), 0.0)
                    gt[i, j] = T.if_then_else(bx * block_m + i < M, _load(dy[bx * block_m + i, j], dtype, "c"), 0.0)
                # statistics: off = mean (0 for rms), rstd
                T.reduce_sum(xt, red, dim=1)
                for i in T.serial(block_m):
                    if rms:
                        off[i] = 0.0
                    else:
                        off[i] = red[i] / T.float32(N)
                for i, j in T.grid(block_m, N):
                    tmp[i, j] = (xt[i, j] - off[i]) * (xt[i, j] - off[i])
                T.reduce_sum(tmp, red, dim=1)
                for i in T.serial(block_m):  # rows past M: 0, not 1/sqrt(0 + eps) (inf with eps=0, NaN in dweight)
                    rstd[i] = T.if_then_else(bx * block_m + i < M,
                                             T.float32(1) / T.sqrt(red[i] / T.float32(N) + T.float32(eps)), 0.0)
                for i, j in T.grid(block_m, N):
                    xt[i, j] = (xt[i, j] - off[i]) * rstd[i]  # xhat
                # c1 = mean(g * xhat), c2 = mean(g), g = dy * w
                for i, j in T.grid(block_m, N):
                    if has_weight:
                        tmp[i, j] = gt[i, j] * _load(w[j], dtype, "c")
                    else:
                        tmp[i, j] = gt[i, j]
                T.reduce_sum(tmp, red, dim=1)
                for i in T.serial(block_m):
                    if rms:
                        c2[i] = 0.0
                    else:
                        c2[i] = red[i] / T.float32(N)
                for i, j in T.grid(block_m, N):
                    tmp[i, j] = tmp[i, j] * xt[i, j]
                T.reduce_sum(tmp, red, dim=1)
                for i in T.serial(block_m):
                    c1[i] = red[i] / T.float32(N)
                for i, j in T.grid(block_m, N):
                    if has_weight:
                        tmp[i, j] = gt[i, j] * _load(w[j], dtype, "c")
                    else:
                        tmp[i, j] = gt[i, j]
                    if bx * block_m + i < M:
                        dx[bx * block_m + i, j] = _store(rstd[i] * (tmp[i, j] - c2[i] - xt[i, j] * c1[i]), dtype, "c")
                # this program's partial dweight / dbias (rows past M hold zeros)
                for j in T.serial(N):
                    acc[0] = 0.0
                    acc[1] = 0.0
                    for i in T.serial(block_m):
                        acc[0] += gt[i, j] * xt[i, j]
                        acc[1] += gt[i, j]
                    pw[bx, j] = acc[0]
                    pb[bx, j] = acc[1]

        return main

    return cpu_norm_bwd


@functools.lru_cache(maxsize=None)
def cuda_program(op: str, n_cols: int, dtype: str, has_weight: bool, eps: float, arch: str | None = None):
    """The CUDA backward (tunables ``block_m``, ``threads``): whole rows in registers."""
    target = "cuda" if arch is None else {"kind": "cuda", "arch": arch}
    N = n_cols
    rms = op == "rms_norm"

    @tilelang.jit(target=target, out_idx=None)
    def cuda_norm_bwd(block_m, threads):
        reason = cuda_check(N, block_m, threads)
        if reason is not None:
            raise ValueError(reason)
        tpr = threads // block_m
        TILE = -(-N // tpr) * tpr
        M = T.dynamic("m")
        P = T.dynamic("p")

        @T.prim_func
        def main(x: T.Tensor((M, N), dtype), w: T.Tensor((N,), dtype), dy: T.Tensor((M, N), dtype),
                 dx: T.Tensor((M, N), dtype), pw: T.Tensor((P, N), F32), pb: T.Tensor((P, N), F32)):
            with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bx:
                xf = T.alloc_fragment((block_m, TILE), F32)
                gf = T.alloc_fragment((block_m, TILE), F32)
                tf = T.alloc_fragment((block_m, TILE), F32)
                red = T.alloc_fragment((block_m,), F32)
                off = T.alloc_fragment((block_m,), F32)
                rstd = T.alloc_fragment((block_m,), F32)
                c1 = T.alloc_fragment((block_m,), F32)
                c2 = T.alloc_fragment((block_m,), F32)
                col = T.alloc_fragment((TILE,), F32)
                for i, j in T.Parallel(block_m, TILE):
                    valid = bx * block_m + i < M and j < N
                    xf[i, j] = T.if_then_else(valid, T.cast(x[bx * block_m + i, j], F32), 0.0)
                    gf[i, j] = T.if_then_else(valid, T.cast(dy[bx * block_m + i, j], F32), 0.0)
                T.reduce_sum(xf, red, dim=1)
                for i in T.Parallel(block_m):
                    if rms:
                        off[i] = 0.0
                    else:
                        off[i] = red[i] / T.float32(N)
                for i, j in T.Parallel(block_m, TILE):
                    tf[i, j] = T.if_then_else(j < N, (xf[i, j] - off[i]) * (xf[i, j] - off[i]), 0.0)
                T.reduce_sum(tf, red, dim=1)
                for i in T.Parallel(block_m):  # rows past M: 0, not 1/sqrt(0 + eps) (inf with eps=0, NaN in dweight)
                    rstd[i] = T.if_then_else(bx * block_m + i < M, T.rsqrt(red[i] / T.float32(N) + T.float32(eps)), 0.0)
                for i, j in T.Parallel(block_m, TILE):
                    xf[i, j] = T.if_then_else(j < N, (xf[i, j] - off[i]) * rstd[i], 0.0)
                for i, j in T.Parallel(block_m, TILE):
                    if has_weight:
                        tf[i, j] = T.if_then_else(j < N, gf[i, j] * T.cast(w[j], F32), 0.0)
                    else:
                        tf[i, j] = gf[i, j]
                T.reduce_sum(tf, red, dim=1)
                for i in T.Parallel(block_m):
                    if rms:
                        c2[i] = 0.0
                    else:
                        c2[i] = red[i] / T.float32(N)
                for i, j in T.Parallel(block_m, TILE):
                    tf[i, j] = tf[i, j] * xf[i, j]
                T.reduce_sum(tf, red, dim=1)
                for i in T.Parallel(block_m):
                    c1[i] = red[i] / T.float32(N)
                for i, j in T.Parallel(block_m, TILE):
                    if bx * block_m + i < M and j < N:
                        if has_weight:
                            dx[bx * block_m + i, j] = T.cast(
                                rstd[i] * (gf[i, j] * T.cast(w[j], F32) - c2[i] - xf[i, j] * c1[i]), dtype)
                        else:
                            dx[bx * block_m + i, j] = T.cast(rstd[i] * (gf[i, j] - c2[i] - xf[i, j] * c1[i]), dtype)
                for i, j in T.Parallel(block_m, TILE):
                    tf[i, j] = gf[i, j] * xf[i, j]
                T.reduce_sum(tf, col, dim=0)
                for j in T.Parallel(TILE):
                    if j < N:
                        pw[bx, j] = col[j]
                T.reduce_sum(gf, col, dim=0)
                for j in T.Parallel(TILE):
                    if j < N:
                        pb[bx, j] = col[j]

        return main

    return cuda_norm_bwd


# -- the backward of one call shape -------------------------------------------------------------

_BUILT: dict[tuple, object] = {}
_LOCK = threading.Lock()


def serves(n: int, target: str) -> bool:
    """Whether these programs hold rows of ``n`` (else the reference backward runs)."""
    return 1 <= n <= C_MAX_N if target == "c" else n >= 1 and cuda_check(n, 1, 1024) is None


def _config(n: int, target: str) -> dict:
    if target == "c":
        return {"block_m": max(1, min(8, C_MAX_ELEMS // max(n, 1)))}
    for threads in (256, 512, 1024):  # one row per CTA, <= 16 values per thread where it fits
        if -(-n // threads) <= 16 and cuda_check(n, 1, threads) is None:
            return {"block_m": 1, "threads": threads}
    return {"block_m": 1, "threads": 1024}


def make_backward(op: str, m: int, n: int, dtype: torch.dtype, has_weight: bool, has_bias: bool, eps: float,
                  target: str):
    """``backward(grad, input, weight, [bias,] output) -> (dinput, dweight[, dbias])``."""
    name = DTYPES[dtype]
    config = _config(n, target)
    key = (op, n, name, has_weight, eps, target, tuple(sorted(config.items())))

    def compiled():
        kernel = _BUILT.get(key)
        if kernel is None:
            with _LOCK:
                kernel = _BUILT.get(key)
                if kernel is None:
                    if target == "c":
                        program = cpu_program(op, n, name, has_weight, eps)
                    else:
                        from .build import cuda_arch

                        program = cuda_program(op, n, name, has_weight, eps, cuda_arch())
                    kernel = _BUILT[key] = program(**config)
        return kernel

    return partials_backward(op, m, n, dtype, has_bias, lambda device: -(-m // config["block_m"]), compiled, target)


def partials_backward(op: str, m: int, n: int, dtype: torch.dtype, has_bias: bool, rows, compiled, target: str):
    """``backward(grad, input, weight, [bias,] output) -> (dinput, dweight[, dbias])`` around the
    kernel ``compiled()``, ``kernel(x, w, dy, dx, pw, pb)``, which writes ``dx`` and ``rows(device)``
    rows of fp32 partials of dweight (``pw``) and dbias (``pb``), the two blocks of one buffer.
    Stage two sums the partials over their rows in a fixed order (deterministic), both in one
    launch where both are wanted: on a CUDA device TileLang's column sums
    (:mod:`~dispatch_tilelang.column_sums`, the cast folded into their store), on the CPU torch's
    sum and a cast. Both kernels are called through their executables
    (:func:`~dispatch_tilelang.direct.args_call`). On CUDA a misaligned tensor is handed over as an
    aligned copy (:func:`~dispatch_tilelang.norms.aligned`); bf16 goes to the C target as its bits."""
    from dispatch.backend import placeholder

    from .direct import args_call

    cuda = target == "cuda"
    bits = target == "c" and dtype == torch.bfloat16
    is_rms = op == "rms_norm"
    name = DTYPES[dtype]
    calls: dict = {}  # the kernel's call, and stage two's per (device, dweight wanted, dbias wanted)

    def kernel_call():
        call = calls.get("kernel")
        if call is None:
            call = calls["kernel"] = args_call(compiled())
        return call

    def stage_two(device, want_w: bool, want_b: bool):
        key = (device, want_w, want_b)
        call = calls.get(key)
        if call is None:
            from . import column_sums
            from .configs import sm_count

            p = rows(device)
            k = int(want_w) + int(want_b)
            cfg = column_sums.config(n, p, k, sm_count(device))
            call = calls[key] = args_call(column_sums.build(n, name, k, 0 if want_w else 1, cfg))
        return call

    def backward(grad, x, weight, *rest):
        bias = rest[0] if len(rest) == 2 else None
        device = x.device
        flat = x.shape == (m, n)  # rows as they come: no view to make
        dx = torch.empty((m, n), dtype=dtype, device=device)
        want_w, want_b = weight is not None, bias is not None and has_bias
        if m == 0:
            dw = torch.zeros_like(weight) if want_w else None
            db = torch.zeros_like(bias) if want_b else None
            dx = dx.view(x.shape)
            return (dx, dw) if is_rms else (dx, dw, db)
        parts = torch.empty((2, rows(device), n), dtype=torch.float32, device=device)  # dweight's, dbias's
        w = weight.reshape(n) if want_w else placeholder(x, dtype, (n,))
        xs, dys = (x, grad) if flat else (x.reshape(m, n), grad.reshape(m, n))
        args = [xs.contiguous(), w, dys.contiguous(), dx]
        if cuda:  # 16-byte vectors from each tensor's start: a misaligned view is copied
            args = [aligned(a) for a in args]
        elif bits:
            args = [a.view(torch.int16) for a in args]
        kernel_call()(*args, parts[0], parts[1])
        dx = dx if flat else dx.view(x.shape)
        if not (want_w or want_b):
            return (dx, None) if is_rms else (dx, None, None)
        # stage two: the k wanted blocks of partials summed over their rows, in the gradients' dtype
        k = int(want_w) + int(want_b)
        if device.type == "cuda":  # one launch, the cast in its store
            sums = torch.empty((k, n), dtype=dtype, device=device)
            stage_two(device, want_w, want_b)(parts, sums)
        else:  # on the CPU: torch's sum and a cast
            sums = parts[0 if want_w else 1:2 if want_b else 1].sum(1).to(dtype)
        shape = (weight if want_w else bias).shape
        if len(shape) != 1:  # a multi-dim normalized_shape
            sums = sums.view(k, *shape)
        dw = sums[0] if want_w else None
        db = sums[k - 1] if want_b else None
        return (dx, dw) if is_rms else (dx, dw, db)

    backward.reads_output = False  # (the output's slot gets None: the caller may change it in place)
    return backward
