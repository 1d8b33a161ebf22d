"""A sample third-party dispatch backend: the softmax family computed online over column chunks.

Each row is read ``chunk`` columns at a time while a running maximum ``m`` and a running sum
``s = sum(exp(x - ref))`` are kept (``ref`` is the last finite maximum, so the sum is rescaled
each time the maximum grows); softmax and log_softmax then make a second chunked pass. The math
is torch's, so NaN rows, infinities and empty tensors come out exactly as torch's do.

It serves the last dim of float32/float16/bfloat16 inputs (accumulating in float32) and refuses
the rest with a reason; the torch reference serves what it refuses. Its priority is low, so it
only runs when forced (``backend="sample"``, ``dispatch.use("sample")``) or when it wins a race.
"""

from __future__ import annotations

import functools

import torch

import dispatch
from dispatch.backend import BackendInfo, CallSpec, Config, TuneSpace, Verdict, hookimpl

__version__ = "0.1.0"

NAME = "sample"
OPS = ("softmax", "log_softmax", "logsumexp")  # the ops these kernels implement
#: The column-chunk widths the tune space offers (config key ``chunk``), and the default.
CHUNKS = (128, 512, 2048, 8192)
DEFAULT_CHUNK = 2048
SERVED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_ACCUMULATE = torch.float32


# -- hooks ----------------------------------------------------------------------------------------

@hookimpl
def dispatch_backend_info() -> BackendInfo:
    return BackendInfo(name=NAME, version=__version__, ops=OPS,
                       priority={"cpu": -10, "cuda": -10}, versions={"torch": torch.__version__},
                       description="online softmax over column chunks, plain torch (a sample plugin)")


@hookimpl
def dispatch_check(op: str, spec: CallSpec) -> Verdict:
    for what, dtype in (("input", spec.dtype), ("output", spec.out_dtype)):
        if dtype not in SERVED_DTYPES:
            return Verdict.no(f"{what} dtype {_name(dtype)} not served (it accumulates in float32); "
                              "use float32, float16 or bfloat16, or the torch reference")
    if spec.ndim > 0 and spec.dims != (spec.ndim - 1,):
        return Verdict.no(f"reduces over the last dim only (asked for dims {list(spec.dims)} of a "
                          f"{spec.ndim}-d input); move that dim last, or let the reference serve it")
    return Verdict.yes("online softmax over column chunks of the last dim")


@hookimpl
def dispatch_tune_space(op: str, spec: CallSpec) -> TuneSpace:
    """Chunk widths up to the first that covers the whole row; wider ones are the same kernel."""
    n = spec.shape[-1] if spec.ndim else 1
    kept: list[int] = []
    pruned = []
    for chunk in CHUNKS:
        if kept and kept[-1] >= n:
            pruned.append((Config.of(chunk=chunk), f"chunk={kept[-1]} already covers a row of {n}"))
        else:
            kept.append(chunk)
    default = DEFAULT_CHUNK if DEFAULT_CHUNK in kept else kept[-1]
    return TuneSpace(configs=[{"chunk": c} for c in kept], default={"chunk": default},
                     build_keys=("chunk",), pruned=pruned)


@hookimpl
def dispatch_kernel(op: str, spec: CallSpec, config: Config):
    chunk = int(Config.of(config).get("chunk", DEFAULT_CHUNK))
    if chunk < 1:
        raise ValueError(f"'chunk' must be a positive int (got {chunk!r})")
    if op == "logsumexp":
        return functools.partial(logsumexp, chunk=chunk, keepdim=spec.keepdim)
    kernel = softmax if op == "softmax" else log_softmax
    return functools.partial(kernel, out_dtype=spec.out_dtype, chunk=chunk)


# -- kernels (the last dim; any strides) ----------------------------------------------------------

def online_stats(x: torch.Tensor, chunk: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One pass over ``x``'s last dim, ``chunk`` columns at a time: ``(m, ref, s)`` per row.

    ``m`` is the row's maximum (NaN if the row has a NaN, -inf if the row is empty), ``ref`` the
    finite value the sum is taken relative to (``m`` when finite, else 0, as torch's logsumexp
    does) and ``s = sum(exp(x - ref))`` in float32.
    """
    rows = x.shape[:-1]
    m = torch.full(rows, float("-inf"), dtype=_ACCUMULATE, device=x.device)
    ref = torch.zeros(rows, dtype=_ACCUMULATE, device=x.device)
    s = torch.zeros(rows, dtype=_ACCUMULATE, device=x.device)
    for start in range(0, x.shape[-1], chunk):
        part = x[..., start:start + chunk].to(_ACCUMULATE)
        m = torch.maximum(m, part.amax(-1))
        new_ref = torch.where(torch.isfinite(m), m, 0.0)
        # rescale what was summed so far to the new ref; nothing summed yet (s == 0, say all -inf
        # so far) stays 0, even when exp(ref - new_ref) overflows
        s = torch.where(s == 0, s, s * torch.exp(ref - new_ref))
        s = s + torch.exp(part - new_ref.unsqueeze(-1)).sum(-1)
        ref = new_ref
    return m, ref, s


def logsumexp(x: torch.Tensor, chunk: int, keepdim: bool = False) -> torch.Tensor:
    """``torch.logsumexp(x, -1, keepdim)``: ``log(s) + ref`` (-inf for empty and all -inf rows)."""
    if x.dim() == 0:
        return logsumexp(x.reshape(1), chunk).reshape(())
    _, ref, s = online_stats(x, chunk)
    out = (torch.log(s) + ref).to(x.dtype)
    return out.unsqueeze(-1) if keepdim else out


def softmax(x: torch.Tensor, out_dtype: torch.dtype, chunk: int) -> torch.Tensor:
    """``torch.softmax(x, -1, dtype=out_dtype)``, a second chunked pass after :func:`online_stats`."""
    return _normalize(x, out_dtype, chunk, log=False)


def log_softmax(x: torch.Tensor, out_dtype: torch.dtype, chunk: int) -> torch.Tensor:
    """``torch.log_softmax(x, -1, dtype=out_dtype)``."""
    return _normalize(x, out_dtype, chunk, log=True)


def _normalize(x: torch.Tensor, out_dtype: torch.dtype, chunk: int, log: bool) -> torch.Tensor:
    if x.dim() == 0:
        return _normalize(x.reshape(1), out_dtype, chunk, log).reshape(())
    x = x.to(out_dtype)  # torch casts to dtype= before the op, so a downcast rounds the input
    m, ref, s = online_stats(x, chunk)
    # The sum relative to the true maximum: NaN when the maximum is +-inf or NaN, as in torch
    # (inf - inf); for every other row ref == m and the factor is exactly 1.
    total = (s * torch.exp(ref - m)).unsqueeze(-1)
    m = m.unsqueeze(-1)
    log_total = torch.log(total)
    out = torch.empty(x.shape, dtype=out_dtype, device=x.device)
    for start in range(0, x.shape[-1], chunk):
        shifted = x[..., start:start + chunk].to(_ACCUMULATE) - m
        out[..., start:start + chunk] = shifted - log_total if log else torch.exp(shifted) / total
    return out


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
