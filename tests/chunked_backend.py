"""A real, if plain, backend for tests: softmax family from torch primitives, chunked over the row.

``make(name, fault=...)`` builds a fresh plugin object; ``fault`` makes it misbehave on purpose:
"raise" (every kernel call raises), "nan" (returns NaN), "wrong" (off by 10%), "slow" (sleeps),
"writes input" (right result, then zeroes its input), "alias" (writes its result into its input and
returns the input), "raise later" (raises from its fifth call on: two cases' first calls, each
run twice, pass), "raw memory" (reads the input's memory as a GPU kernel does, so a lazily negated
view reads as its raw values).
"""

from __future__ import annotations

import time
import types

import torch

import dispatch
from dispatch import BackendInfo, Verdict
from dispatch.autotune import Config, TuneSpace


def _kernel(op, spec, chunk: int):
    dim = spec.dims[0]

    def run(x: torch.Tensor) -> torch.Tensor:
        xf = x.to(torch.float32) if spec.out_dtype != torch.float64 else x.to(torch.float64)
        m = xf.amax(dim, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        total = torch.zeros_like(m)
        for part in torch.split(xf, chunk, dim=dim):
            total = total + torch.exp(part - m).sum(dim, keepdim=True)
        if op == "softmax":
            out = torch.exp(xf - m) / total
        elif op == "log_softmax":
            out = xf - m - torch.log(total)
        else:
            out = (m + torch.log(total))
            out = torch.where(xf.amax(dim, keepdim=True) == float("inf"), float("inf"), out)
            if not spec.keepdim:
                out = out.squeeze(dim)
        return out.to(spec.out_dtype)
    return run


def make(name: str = "chunked", fault: str | None = None, priority: int = 50, calls: list | None = None):
    """A plugin object implementing the dispatch hooks (pass it to ``dispatch.register``)."""
    plugin = types.SimpleNamespace()
    calls = calls if calls is not None else []

    @dispatch.hookimpl
    def dispatch_backend_info():
        return BackendInfo(name=name, version="1.0", ops=("softmax", "log_softmax", "logsumexp"), priority={"cpu": priority, "cuda": priority})

    @dispatch.hookimpl
    def dispatch_check(op, spec):
        if spec.dtype not in (torch.float32, torch.float64) or spec.out_dtype != spec.dtype:
            return Verdict.no(f"dtype {spec.dtype} not served; use float32 or float64 without a cast")
        if len(spec.dims) != 1:
            return Verdict.no("reduces one dim only")
        return Verdict.yes()

    @dispatch.hookimpl
    def dispatch_tune_space(op, spec):
        return TuneSpace(configs=[{"chunk": 8}, {"chunk": 64}, {"chunk": 1024}], default={"chunk": 64},
                         tunables=("chunk",))

    @dispatch.hookimpl
    def dispatch_kernel(op, spec, config):
        inner = _kernel(op, spec, Config.of(config).get("chunk", 64))

        def run(x):
            calls.append(op)
            if fault == "raise" or (fault == "raise later" and len(calls) >= 5):
                raise RuntimeError(f"{name} kernel crashed")
            if fault == "slow":
                time.sleep(0.002)
            if fault == "raw memory":  # the storage as it is, without the view's negation bit
                x = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage(), x.storage_offset(), x.shape, x.stride())
            out = inner(x)
            if fault == "nan":
                return torch.full_like(out, float("nan"))
            if fault == "wrong":
                return out * 1.1
            if fault == "writes input":
                x.zero_()
            if fault == "alias" and x.shape == out.shape:
                return x.copy_(out)
            return out
        return run

    for fn in (dispatch_backend_info, dispatch_check, dispatch_tune_space, dispatch_kernel):
        setattr(plugin, fn.__name__, fn)
    plugin.calls = calls
    return plugin


def with_kernel(plugin, wrap):
    """``plugin`` (from :func:`make`) with its kernel replaced by ``wrap(run, config)``, ``run`` the
    chunked kernel of the same call and config: a kernel that misbehaves on purpose."""
    inner = plugin.dispatch_kernel

    @dispatch.hookimpl
    def dispatch_kernel(op, spec, config):
        return wrap(inner(op=op, spec=spec, config=config), config)

    plugin.dispatch_kernel = dispatch_kernel
    return plugin
