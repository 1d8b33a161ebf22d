"""The torch reference backend: serves every call on every device; the correctness oracle."""

from __future__ import annotations

import functools

import torch

import dispatch
from dispatch.backend import BackendInfo, CallSpec, Verdict, hookimpl

NAME = "torch"


@hookimpl
def dispatch_backend_info() -> BackendInfo:
    return BackendInfo(name=NAME, version=torch.__version__, ops=dispatch.OPS,
                       priority={"cpu": 100, "cuda": 0}, versions={"torch": torch.__version__},
                       description="torch's own ops (the reference)", reference=True)


@hookimpl
def dispatch_check(op: str, spec: CallSpec) -> Verdict:
    return Verdict.yes("the reference serves every call")


@hookimpl
def dispatch_kernel(op: str, spec: CallSpec, config) -> object:
    return reference_kernel(op, spec)


def reference_kernel(op: str, spec: CallSpec):
    """torch's own function for ``spec``, taking the input alone (the kernel the oracle runs)."""
    # functools.partial: called from C, no Python frame on the hot path
    if op == "logsumexp":
        return functools.partial(torch.logsumexp, dim=spec.dims or (0,), keepdim=spec.keepdim)
    fn = torch.softmax if op == "softmax" else torch.log_softmax
    dim = spec.dims[0] if spec.dims else 0
    if spec.out_dtype == spec.dtype:
        return functools.partial(fn, dim=dim)
    return functools.partial(fn, dim=dim, dtype=spec.out_dtype)
