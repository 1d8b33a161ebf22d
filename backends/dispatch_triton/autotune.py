"""Triton's native autotuner over the kernel: ``triton.autotune`` wrapper, its launch, config conversions."""

from __future__ import annotations

import threading

import torch
import triton

from .configs import _OP_CODE, _PATH_CODE, _cfg, _cfg_key, _check_op, _n_split, _np2, _universe, config_space
from . import _interpreting
from .jit import _softmax_kernel
from .buffers import _slot_buffer, _sync_buffer
from .launch import _empty_result, _grid_size, _prepare, placeholder


_AUTOTUNED: dict = {}
_AUTOTUNED_LOCK = threading.Lock()


def _to_triton(c: dict) -> triton.Config:
    return triton.Config({"PATH": _PATH_CODE[c["path"]], "BLOCK_N": c["BLOCK_N"], "ROWS": c["ROWS"],
                          "SPLIT": c["SPLIT"], "NW": c["num_warps"], "NS": c["num_stages"],
                          "FAST_EXP": int(c.get("FAST_EXP", 0))},
                         num_warps=c["num_warps"], num_stages=c["num_stages"])


def config_from_triton(cfg: triton.Config) -> dict:
    """The config dict of a ``triton.Config`` this module built (e.g. an autotuner's winner)."""
    kw = cfg.kwargs
    code = kw["PATH"]
    if code == 0:
        path = "rows" if kw["ROWS"] > 1 else "onepass"
    elif code == 1:
        path = "split_online" if kw["SPLIT"] > 1 else "online"
    else:
        path = {2: "split", 3: "split_pipe", 4: "chunks"}[code]
    return _cfg(path, kw["BLOCK_N"], kw["ROWS"], kw["SPLIT"], cfg.num_warps, cfg.num_stages, kw.get("FAST_EXP", 0))


def _max_split_of(op: str, N: int, dtype: torch.dtype) -> int:
    ns = 1
    for c in config_space(op, 0, N, dtype):
        ns = max(ns, _n_split(_PATH_CODE[c["path"]], N, c["BLOCK_N"], c["SPLIT"]))
    return ns


def autotuned(op: str, do_bench=None):
    """The ``triton.autotune``-wrapped kernel for ``op`` (one per (op, do_bench), cached).

    ``key`` is ``N_BUCKET`` only (the next power of two of N; Triton adds every tensor
    argument's dtype), the configs are this op's candidates across all buckets, pruned at each
    launch to ``config_space(op, M, N, x.dtype)``. Launch it through :func:`run_autotuned` (or
    :func:`launch_autotuned`), which passes the int8 placeholder when there is no mask.
    """
    _check_op(op)
    key = (op, do_bench)
    fn = _AUTOTUNED.get(key)
    if fn is None:
        with _AUTOTUNED_LOCK:
            fn = _AUTOTUNED.get(key)
            if fn is None:
                configs = [_to_triton(c) for c in _universe(op)]

                def prune(configs, named_args, **kwargs):
                    x = named_args["x_ptr"]
                    n = int(named_args["N"])
                    allowed = [_cfg_key(c) for c in config_space(op, int(named_args["M"]), n, x.dtype)]
                    if _interpreting() and op != "logsumexp":
                        # the interpreter runs programs one by one: split partials could never meet
                        allowed = [k for k in allowed
                                   if k[0] in ("rows", "onepass") or _n_split(_PATH_CODE[k[0]], n, k[1], k[3]) == 1]
                    by_key = {_cfg_key(config_from_triton(c)): c for c in configs}
                    kept = [by_key[k] for k in allowed if k in by_key]
                    if not kept:
                        raise ValueError(f"no {op} config fits N={n}")
                    return kept

                fn = triton.autotune(configs=configs, key=["N_BUCKET"], prune_configs_by={"early_config_prune": prune},
                                     do_bench=do_bench)(_softmax_kernel)
                _AUTOTUNED[key] = fn
    return fn


def launch_autotuned(kernel, op: str, x: torch.Tensor, out: torch.Tensor, mask_arg: torch.Tensor, has_mask: bool
                     ) -> torch.Tensor:
    """Launch an :func:`autotuned` kernel with explicit mask argument and ``HAS_MASK`` toggle.

    Low level (the tests use it to check cache keys); :func:`run_autotuned` is the normal entry.
    """
    M, N = x.shape
    ns = _max_split_of(op, N, x.dtype)
    lse = op == "logsumexp"
    ws = torch.empty(M * ns * 2, dtype=torch.float32, device=x.device) if (lse and ns > 1) else placeholder(
        x, torch.float32)
    sync = _sync_buffer(x.device, M if lse else 0)
    slots = _slot_buffer(x.device, M * ns) if op != "logsumexp" else placeholder(x, torch.int64)
    out_stride = N if op != "logsumexp" else 1
    mstride = mask_arg.stride(0) if (has_mask and mask_arg.dim() == 2) else 0
    args = (x, out, mask_arg, ws, sync, slots, M, N, x.stride(0), out_stride, mstride, _np2(N))

    def grid(meta):
        return (_grid_size(x.device, M, N, args, meta),)

    kernel[grid](*args, OP=_OP_CODE[op], HAS_MASK=bool(has_mask), PHASE=0)
    return out


def run_autotuned(op: str, x: torch.Tensor, out_dtype: torch.dtype | None = None, mask: torch.Tensor | None = None,
                  do_bench=None) -> torch.Tensor:
    """Like :func:`run`, the config chosen by Triton's autotuner (see :func:`autotuned`)."""
    M, N, out_dtype, mask, out = _prepare(op, x, out_dtype, mask)
    if _empty_result(op, M, N, out):
        return out
    kernel = autotuned(op, do_bench)
    has_mask = mask is not None
    mask_arg = mask if has_mask else placeholder(x, torch.int8)
    return launch_autotuned(kernel, op, x, out, mask_arg, has_mask)
