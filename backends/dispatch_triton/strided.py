"""Reductions over a dim that is not unit-stride: the (outer, R, inner) plan and its launcher.

A call is served without copying its input when it has a plan (:func:`plan`, the framework's
:func:`dispatch.backend.strided_plan` for one op): its reduced dims collapse to one dim of length
``R`` and its other dims to at most three groups, ``inner`` (the one of smallest stride) and one
or two outer ones. The output is laid out as torch's: contiguous, of the op's output shape
(softmax and log_softmax: the input's shape; logsumexp: the reduced shape). :class:`StridedLauncher`
runs :func:`~dispatch_triton.strided_jit._strided_kernel` on it, with a config of
:mod:`~dispatch_triton.strided_configs` (whose names this module re-exports).
"""

from __future__ import annotations

import torch

from dispatch.backend import StridedPlan, strided_plan

from .buffers import _split_slots
from .configs import _cdiv, _check_op, _device_sms, _np2  # noqa: F401 (_device_sms, _np2: re-exported)
from .direct import DirectLaunch
from . import _interpreting
from .row_math import fast_exp_of
from .strided_configs import (  # noqa: F401 (re-exported: the configs this launcher takes)
    _MERGE_TILE,
    _ONE_PASS_MAX,
    TUNABLES,
    VARIANTS,
    _cfg,
    _two_tile_config,
    _wide_config,
    config_space,
    default_config,
    head_tail,
    merge_block,
    merge_warps,
    split_for,
    validate,
    variant_space,
)
from .strided_jit import _strided_coop, _strided_finish, _strided_kernel, _strided_partials

_OP_CODE = {"softmax": 0, "log_softmax": 1, "logsumexp": 2}


def plan(op: str, shape, stride, dims) -> StridedPlan | str:
    """The plan of ``op`` over ``dims`` of an input of ``shape``/``stride``, or why there is none."""
    _check_op(op)
    return strided_plan(shape, stride, dims, reduced_output=op == "logsumexp", one_dim=op != "logsumexp")


def _tma_allocator() -> None:
    """Device-side tensor descriptors (``TMA``) need scratch memory: from torch's allocator, unless
    an allocator is set already."""
    import triton

    try:
        from triton.runtime import _allocation

        if not isinstance(_allocation._allocator.get(), _allocation.NullAllocator):
            return
    except (ImportError, AttributeError):
        pass

    def alloc(size: int, alignment: int, stream):
        return torch.empty(size, dtype=torch.int8, device="cuda")

    if hasattr(triton, "set_allocator"):
        triton.set_allocator(alloc)


class StridedLauncher:
    """``run(x)``: ``op`` of an ``x`` laid out as ``p`` says, into a new contiguous ``out_shape`` tensor.

    Built once per call spec and config; ``x`` is handed to the kernel as it is (its data pointer,
    at the plan's strides), never copied.
    """

    def __init__(self, op: str, p: StridedPlan, out_dtype: torch.dtype, out_shape, device, config: dict):
        _check_op(op)
        bi, br, w, split = validate(config)
        one_pass, acc_2d = bool(int(config.get("ONE_PASS", 0))), bool(int(config.get("ACC_2D", 0)))
        prefetch = bool(int(config.get("PREFETCH", 0)))
        tma = bool(int(config.get("TMA", 0)))
        fast_exp, reverse = bool(fast_exp_of(config)), bool(int(config.get("REVERSE", 0)))
        keep_x = bool(int(config.get("KEEP_X", 0))) and op != "logsumexp"  # logsumexp reads x once
        coop = bool(int(config.get("COOP", 0)))
        if coop and op == "logsumexp":
            raise ValueError("'COOP' writes softmax and log_softmax from the tiles it holds; logsumexp reads x once "
                             "anyway and shares R through its partials (leave COOP out)")
        if coop and _cdiv(p.R, split) > br:
            raise ValueError(f"'COOP' holds a program's share of R in one tile: 'BLOCK_R' >= cdiv(R, SPLIT_R) (got "
                             f"BLOCK_R {br}, SPLIT_R {split}, R {p.R}: {_cdiv(p.R, split)} rows a program)")
        stages = int(config.get("num_stages", 3))  # of the TMA loop (tl.range), and the launch option
        if tma and (one_pass or p.x_strides[2] != 1 or bi > 256 or br > 256):
            raise ValueError("'TMA' reads (R, inner) tiles of at most 256 x 256 from an input whose inner dim is "
                             f"unit-stride, without ONE_PASS (got inner stride {p.x_strides[2]}, BLOCK_I {bi}, "
                             f"BLOCK_R {br}, ONE_PASS {int(one_pass)})")
        if tma:
            _tma_allocator()
        tail = int(config.get("TAIL", 0))
        if one_pass and not tail and br < p.R:
            raise ValueError(f"'ONE_PASS' needs 'BLOCK_R' >= R (got BLOCK_R {br}, R {p.R})")
        if tail and not br < p.R <= br + tail:
            head, rest = head_tail(p.R)
            raise ValueError(f"'TAIL' holds the rows of R past 'BLOCK_R': BLOCK_R < R <= BLOCK_R + TAIL (got "
                             f"BLOCK_R {br}, TAIL {tail}, R {p.R})" + (
                                 f"; for R = {p.R}: BLOCK_R {head}, TAIL {rest}" if rest else
                                 f"; R = {p.R} fits one tile: BLOCK_R {_np2(p.R)} without TAIL"))
        # no masks where every chunk of R (and of a split's rows: a multiple of BLOCK_R) is full
        even = (bool(int(config.get("EVEN", 0))) and (p.R == br + tail if tail else p.R % br == 0)
                and p.inner % bi == 0)
        # 32-bit offsets within a slab where every one of the tile's fits (ONE_PASS only)
        n_ib = _cdiv(p.inner, bi)
        rows = _cdiv(p.R, br) * br if coop else br + tail  # a slab's rows that the tiles' offsets reach
        i32 = bool(int(config.get("I32", 0))) and (one_pass or coop) and all(
            (rows - 1) * sr + (n_ib * bi - 1) * si < 2**31 for sr, si in
            ((p.x_strides[1], p.x_strides[2]), (p.out_strides[1], p.out_strides[2])))
        device = torch.empty(0, device=device).device
        if coop and device.type == "cuda" and _cdiv(p.R, br) > _device_sms(device):
            raise ValueError(f"'COOP' needs the {_cdiv(p.R, br)} programs that share a column block resident at once; "
                             f"this device has {_device_sms(device)} SMs: use a larger BLOCK_R")
        self.op, self.plan, self.config, self.device = op, p, dict(config), device
        out_shape = tuple(int(d) for d in out_shape)
        empty = torch.empty
        self.grid = (p.outer * n_ib,)
        if p.outer * p.inner == 0 or (p.R == 0 and op != "logsumexp"):
            self.direct = ()

            def run(x):
                return empty(*out_shape, dtype=out_dtype, device=device) if out_shape else \
                    empty((), dtype=out_dtype, device=device)
        elif p.R == 0:  # logsumexp of nothing: -inf
            self.direct = ()

            def run(x):
                return torch.full(out_shape, float("-inf"), dtype=out_dtype, device=device)
        else:
            rows_per_split = _cdiv(_cdiv(p.R, split), br) * br
            n_splits = _cdiv(p.R, rows_per_split)
            xs, os_ = p.x_strides, p.out_strides
            common = dict(R=p.R, INNER=p.inner, n_iblocks=n_ib, outer1=p.outer1 or p.outer, sxo2=p.strides2[0],
                          sxo=xs[0], sxr=xs[1], sxi=xs[2], BLOCK_R=br, BLOCK_I=bi)
            out_strides = dict(soo2=p.strides2[1], soo=os_[0], sor=os_[1], soi=os_[2], OP=_OP_CODE[op])
            options, direct = dict(num_warps=w), not _interpreting()
            if "num_stages" in config:
                options["num_stages"] = int(config["num_stages"])
            size = out_shape or ((),)
            if coop:
                run = self._coop(common, out_strides, options, direct, even, fast_exp, i32, size, out_dtype)
            elif n_splits == 1:
                k = DirectLaunch(_strided_kernel, self.grid, 2,
                                 dict(common, **out_strides, EVEN=even, ONE_PASS=one_pass, ACC_2D=acc_2d,
                                      PREFETCH=prefetch, TMA=tma, STAGES=stages, FAST_EXP=fast_exp, KEEP_X=keep_x,
                                      TAIL=tail, I32=i32),
                                 options, enabled=direct)
                self.direct = (k,)

                def run(x):
                    out = empty(*size, dtype=out_dtype, device=device)
                    k.launch(x, out)
                    return out
            else:
                split_args = dict(common, rows_per_split=rows_per_split, n_splits=n_splits)
                self.grid = (p.outer * n_ib, n_splits)
                k1 = DirectLaunch(_strided_partials, self.grid, 2,
                                  dict(split_args, EVEN=even, ACC_2D=acc_2d, PREFETCH=prefetch, TMA=tma, STAGES=stages,
                                       FAST_EXP=fast_exp, KEEP_X=keep_x),
                                  options,
                                  enabled=direct)
                block_s = _np2(n_splits)
                finish_args, finish_grid, finish_even, fi = split_args, (p.outer * n_ib, n_splits), even, bi
                if op == "logsumexp":  # the finish only merges: its own column blocks, enough to fill the device
                    fi = merge_block(p, bi, device)
                    finish_args = dict(split_args, n_iblocks=_cdiv(p.inner, fi), BLOCK_I=fi)
                    finish_grid = (p.outer * _cdiv(p.inner, fi), 1)
                    finish_even = even and p.inner % fi == 0
                merge_s = min(block_s, max(1, _MERGE_TILE // fi))
                k2 = DirectLaunch(_strided_finish, finish_grid, 3,
                                  dict(finish_args, **out_strides, BLOCK_S=block_s, MERGE_S=merge_s,
                                       EVEN=finish_even, PREFETCH=prefetch, TMA=tma, STAGES=stages,
                                       FAST_EXP=fast_exp, REVERSE=reverse, KEEP_X=keep_x),
                                  options if op != "logsumexp" else dict(options, num_warps=merge_warps(block_s, fi)),
                                  enabled=direct)
                self.direct = (k1, k2)
                ws_numel = 2 * p.outer * n_splits * p.inner

                def run(x):
                    # the partials of this call only: every slot is written before it is read, and a
                    # fresh buffer keeps concurrent streams and captured graphs apart
                    ws = empty(ws_numel, dtype=torch.float32, device=device)
                    out = empty(*size, dtype=out_dtype, device=device)
                    k1.launch(x, ws)
                    k2.launch(x, out, ws)
                    return out

                self._ws_numel = ws_numel
        self._out = (tuple(out_shape), out_dtype)

        if tma and self.direct:
            inner_run, (sxo, sxr, _) = run, p.x_strides

            def run(x):
                esz = x.element_size()
                if (x.data_ptr() % 16 or (sxr * esz) % 16 or (p.outer > 1 and (sxo * esz) % 16)
                        or (p.strides2[0] * esz) % 16 or (bi * esz) % 16):
                    raise ValueError("'TMA' needs a 16-byte aligned input, R and outer strides and column block "
                                     f"(got address {x.data_ptr()}, strides {p.x_strides}, BLOCK_I {bi}, "
                                     f"{esz}-byte elements)")
                return inner_run(x)

        run.launcher = self
        self.run = run

    def _coop(self, common: dict, out_strides: dict, options: dict, direct: bool, even: bool, fast_exp: bool,
              i32: bool, size, out_dtype):
        """``run(x)`` of the ``COOP`` path: one launch of a group of ``cdiv(R, BLOCK_R)`` programs per
        column block, exchanging partials through the stream's slot buffer (one private to a launch
        captured in a CUDA graph); under the interpreter two, publish then write."""
        p, bi, br = self.plan, common["BLOCK_I"], common["BLOCK_R"]
        tiles = _cdiv(p.R, br)
        self.grid = (p.outer * _cdiv(p.inner, bi) * tiles,)
        args = dict(common, **out_strides, SPLIT=tiles, SPLIT_P2=_np2(tiles), EVEN=even, FAST_EXP=fast_exp, I32=i32)
        phases = (0,) if direct else (1, 2)
        self.direct = tuple(DirectLaunch(_strided_coop, self.grid, 3, dict(args, PHASE=ph), options, enabled=direct)
                            for ph in phases)
        partials = self.grid[0] * bi  # (max, sum) pairs: every tile's columns
        launches, empty, device = self.direct, torch.empty, self.device

        def run(x):
            out = empty(*size, dtype=out_dtype, device=device)
            slots = _split_slots(device, partials)
            for k in launches:
                k.launch(x, out, slots)
            return out

        return run

    def compile(self, x: torch.Tensor) -> None:
        """Compile (and load) the kernels that ``run(x)`` launches, without launching them: safe
        from another thread, so that several launchers can be built at once (nothing under the
        Triton interpreter, which compiles nothing)."""
        if _interpreting() or not self.direct:
            return
        shape, dtype = self._out
        out = torch.empty(shape or (), dtype=dtype, device=self.device)
        if int(self.config.get("COOP", 0)):  # a stand-in of the slot buffer's dtype
            self.direct[0].compile(x, out, torch.zeros(1, dtype=torch.int64, device=self.device))
        elif len(self.direct) == 1:
            self.direct[0].compile(x, out)
        else:
            ws = torch.empty(self._ws_numel, dtype=torch.float32, device=self.device)
            self.direct[0].compile(x, ws)
            self.direct[1].compile(x, out, ws)
