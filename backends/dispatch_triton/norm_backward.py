"""The rms_norm and layer_norm backward on Triton, host side: the backward a call shape makes from its
launch plan (:mod:`dispatch_triton.norm_backward_plan`), with its buffers and launches (kernels in
:mod:`dispatch_triton.norm_backward_kernels` and, for the one launch of long rows,
:mod:`dispatch_triton.norm_backward_coop`).

``make_backward(..., plan=)`` overrides entries of the plan (tile, warps, programs, registers,
eviction hints, prefetch, the one-launch exchange, the saved statistics). Every launch goes through
a :class:`~dispatch_triton.direct.DirectLaunch`: after the first call the compiled kernel's launcher
is called with its arguments prepacked.
"""

from __future__ import annotations

import threading

import torch

from dispatch.backend import placeholder

from . import _interpreting
from .direct import DirectLaunch
from .buffers import _SLOT_OFF, _split_slots
from .norm_backward_coop import _norm_bwd_coop
from .norm_backward_kernels import _column_sum, _norm_bwd, _norm_bwd_split, _norm_bwd_sums
from .norm_backward_plan import backward_plan
from .norm_configs import _cdiv, _np2


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


def make_backward(op: str, m: int, n: int, dtype: torch.dtype, row_stride: int, eps: float,
                  has_weight: bool, has_bias: bool, weight_grad: bool = True, bias_grad: bool = True,
                  split: tuple[int, int] | None = None, plan: dict | None = None):
    """``backward(grad, input, weight, [bias,] output[, stats]) -> (dinput, dweight[, dbias])`` for one
    call shape.

    ``weight_grad``/``bias_grad`` False: that gradient is not wanted (a frozen parameter) and is None.
    ``split``: ``(row groups, chunk length)`` forces the long-row path; ``plan``: entries that
    override the computed plan's, checked here (see :func:`~dispatch_triton.norm_backward_plan.backward_plan`).

    Long rows (the "split" plans, unless ``SAVED`` is overridden False): ``backward.saves(input,
    ...)`` returns a buffer for the forward to store each row's rstd in (layer_norm: rstd, then the
    mean; see :func:`dispatch_triton.norms.NormLauncher`); handed back as ``stats``, it spares the
    backward recomputing them (a chunk then exchanges one sum, layer_norm's two, not two and four).
    Without it (a torch.compile graph's backward node) the backward recomputes them."""
    is_rms = op == "rms_norm"
    overrides = dict(plan) if plan else None
    checked = backward_plan(m, n, dtype, torch.device("cpu"), split, overrides)  # a bad override raises now
    plans: dict = {}
    lock = threading.Lock()

    def build(device, dy_stride: int, has_w: bool, want_dw: bool, want_db: bool, saved: bool):
        k = int(want_dw) + int(want_db)
        plan = backward_plan(m, n, dtype, device, split, overrides, grads=max(k, 1), op=op)
        enabled = not _interpreting()
        flags = dict(IS_RMS=is_rms, HAS_WEIGHT=has_w)
        options = dict(num_warps=plan["num_warps"], num_stages=plan["num_stages"])
        if plan["maxnreg"] and device.type == "cuda":
            options["maxnreg"] = plan["maxnreg"]  # keeps every persistent program resident
        anchor = torch.empty(0, device=device)
        ph32 = placeholder(anchor, torch.float32)
        fixed = () if saved else (ph32,)  # the statistics' argument: a call's, or a placeholder
        finish = plan.get("FINISH", 0) if k else 0
        if plan["kind"] == "rows":
            g = plan["G"]
            cw = plan["BLOCK_N"] // max(finish, 1)
            main = DirectLaunch(_norm_bwd, (g,), 8, dict(M=m, N=n, stride_xm=row_stride, stride_dym=dy_stride,
                                                         stride_dxm=n, p_off_b=g * n if want_dw else 0, eps=float(eps),
                                                         WANT_DW=want_dw, WANT_DB=want_db, BLOCK_N=plan["BLOCK_N"],
                                                         ROWS=plan["ROWS"], EVICT=plan["EVICT"],
                                                         PREFETCH=plan["PREFETCH"], STAGES=plan["STAGES"],
                                                         FINISH=finish, FINISH_BG=min(_np2(g), max(1, 4096 // cw)),
                                                         **flags),
                                options, enabled=enabled, checked=(0, 2, 3))
            stages = (main,)
        else:
            g, s, bn = plan["GR"], plan["S"], plan["BLOCK_N"]
            # HINTS: the sums' loads evict_last (2), so that the second launch finds x and dy in
            # L2, whose loads are then evict_first (1)
            hints, prefetch = plan["HINTS"], plan["PREFETCH"]
            if plan["COOP"]:
                # FINISH: slices of at least 32 columns (a 128-byte line a row), 4096 partials a step
                cw = max(32, _np2(n) // max(finish, 1))
                coop = DirectLaunch(_norm_bwd_coop, (g * s,), 9, dict(M=m, N=n, stride_xm=row_stride,
                                                                     stride_dym=dy_stride, stride_dxm=n,
                                                                     p_off_b=g * n if want_dw else 0, eps=float(eps),
                                                                     WANT_DW=want_dw, WANT_DB=want_db, BLOCK_N=bn,
                                                                     CHUNKS_P2=_np2(s), SLOT_OFF=_SLOT_OFF,
                                                                     SAVED=saved, FINISH=finish, FINISH_CW=cw,
                                                                     FINISH_BG=min(_np2(g), max(1, 4096 // cw)),
                                                                     **flags),
                                    options, enabled=enabled, checked=(0, 2, 3), fixed=fixed)
                stages = (coop,)
            else:
                sums = DirectLaunch(_norm_bwd_sums, (g, s), 5,
                                    dict(M=m, N=n, stride_xm=row_stride, stride_dym=dy_stride, eps=float(eps),
                                         BLOCK_N=bn, CHUNKS_P2=_np2(s), EV=2 if hints else 0, PREFETCH=prefetch,
                                         SAVED=saved, **flags),
                                    options, enabled=enabled, checked=(0, 2, 3), fixed=fixed)
                dx = DirectLaunch(_norm_bwd_split, (g, s), 7, dict(M=m, N=n, stride_xm=row_stride, stride_dym=dy_stride,
                                                                    stride_dxm=n, p_off_b=g * n if want_dw else 0,
                                                                    eps=float(eps), WANT_DW=want_dw, WANT_DB=want_db,
                                                                    BLOCK_N=bn, CHUNKS_P2=_np2(s), EV=1 if hints else 0,
                                                                    PREFETCH=prefetch, SAVED=saved, **flags),
                                  options, enabled=enabled, checked=(0, 2, 3), fixed=fixed)
                stages = (sums, dx)
        reduce = None
        if k and not finish:  # columns of 32 fp32 (a 128-byte line a row), up to 128 partial rows a step
            rbn = min(32, max(16, _np2(n)))
            reduce = DirectLaunch(_column_sum, (_cdiv(n, rbn), k), 3,
                                  dict(G=g, N=n, BLOCK_G=min(128, _np2(g)), BLOCK_N=rbn),
                                  dict(num_warps=4, num_stages=1), enabled=enabled)
        ws_size = m * plan.get("S", 0) * 4
        return plan, g, k, stages, reduce, ws_size, ph32, placeholder(anchor, dtype), finish, placeholder(anchor,
                                                                                                        torch.int64)

    def backward(grad, x, weight, *rest):
        # rest: (bias,) for layer_norm, then the output, then the statistics where the forward saved them
        bias = None if is_rms else rest[0]
        stats = rest[-1] if len(rest) == (2 if is_rms else 3) else None
        want_dw = has_weight and weight_grad and weight is not None
        want_db = has_bias and bias_grad and bias is not None
        device = x.device
        dx = torch.empty(x.shape, dtype=dtype, device=device)
        if m == 0 or n == 0:
            dw = torch.zeros_like(weight) if want_dw else None
            db = torch.zeros_like(bias) if want_db else None
            return (dx, dw, db) if not is_rms else (dx, dw)
        dy, dy_stride = _dense_rows(grad, m, n)
        key = (device, dy_stride, weight is not None, want_dw, want_db, stats is not None)
        built = plans.get(key)
        if built is None:
            with lock:
                built = plans.get(key)
                if built is None:
                    built = plans[key] = build(*key)
        plan, g, k, stages, reduce, ws_size, ph32, ph, finish, ph64 = built
        partials = torch.empty(k * g * n, dtype=torch.float32, device=device) if k else ph32
        w_arg = weight if weight is not None else ph
        st = () if stats is None else (stats,)
        dw = torch.empty(weight.shape, dtype=weight.dtype, device=device) if want_dw else None
        db = torch.empty(bias.shape, dtype=bias.dtype, device=device) if want_db else None
        outs = [t for t in (dw, db) if t is not None]
        o0, o1 = (outs[0], outs[-1]) if finish else (ph, ph)  # FINISH: the column sums in the same launch
        if plan["kind"] == "rows":  # FINISH's tickets in the stream's slot buffer's word 0
            stages[0].launch(x, dx, dy, w_arg, partials, o0, o1, _split_slots(device, 0) if finish else ph64)
        elif plan["COOP"]:  # up to four tagged words per row and chunk in the stream's slot buffer (FINISH: word 1)
            stages[0].launch(x, dx, dy, w_arg, partials, o0, o1, _split_slots(device, 2 * m * plan["S"]), *st)
        else:
            ws = torch.empty(ws_size, dtype=torch.float32, device=device)
            stages[0].launch(x, ws, dy, w_arg, *st)
            stages[1].launch(x, dx, dy, w_arg, partials, ws, *st)
        if reduce is not None:  # the column sums by a second launch
            reduce.launch(partials, outs[0], outs[-1])
        return (dx, dw) if is_rms else (dx, dw, db)

    if checked["kind"] == "split" and checked["SAVED"]:
        def saves(x, *rest):
            return (torch.empty(m if is_rms else 2 * m, dtype=torch.float32, device=x.device),)

        backward.saves = saves
    backward.reads_output = False  # (the output's slot gets None: the caller may change it in place)
    return backward
