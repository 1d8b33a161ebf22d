"""Backend ``rowsum_matmul``: masked row sums as a matrix-vector product, with its own backward."""

from __future__ import annotations

import torch

from dispatch.backend import BackendInfo, CallSpec, Verdict, hookimpl

NAME = "rowsum_matmul"


@hookimpl
def dispatch_backend_info() -> BackendInfo:
    return BackendInfo(name=NAME, version="0.1.0", ops=("masked_rowsum",), priority={"cpu": 40, "cuda": 40},
                       description="masked row sums as x @ ones")


@hookimpl
def dispatch_check(op: str, spec: CallSpec) -> Verdict:
    if spec.shape[-1] == 0:
        return Verdict.no("empty rows: nothing to multiply; the reference serves them")
    return Verdict.yes()


@hookimpl
def dispatch_kernel(op: str, spec: CallSpec, config):
    keepdim = spec.keepdim

    def rowsum(input, mask=None):
        x = input.float() if input.dtype in (torch.float16, torch.bfloat16) else input
        if mask is not None:
            x = x * mask.to(x.dtype)
        ones = torch.ones(x.shape[-1], 1, dtype=x.dtype, device=x.device)
        out = (x @ ones).squeeze(-1).to(input.dtype)
        return out.unsqueeze(-1) if keepdim else out
    return rowsum


@hookimpl
def dispatch_backward(op: str, spec: CallSpec):
    keepdim = spec.keepdim

    def backward(grad, input, mask, out):
        g = (grad if keepdim else grad.unsqueeze(-1)).expand(input.shape)
        return (g if mask is None else g * mask.to(g.dtype)).to(input.dtype), None
    return backward
