"""Backend ``rowsum_chunked``: masked row sums over column chunks, the chunk size tuned."""

from __future__ import annotations

import functools

import torch

from dispatch.backend import BackendInfo, CallSpec, Config, TuneSpace, Verdict, hookimpl, placeholder

NAME = "rowsum_chunked"


@hookimpl
def dispatch_backend_info() -> BackendInfo:
    return BackendInfo(name=NAME, version="0.1.0", ops=("masked_rowsum",), priority={"cpu": 50, "cuda": 50},
                       description="masked row sums over column chunks")


@hookimpl
def dispatch_check(op: str, spec: CallSpec) -> Verdict:
    if spec.dtype == torch.float64:
        return Verdict.no("input dtype float64 not served; float32, float16 and bfloat16 are")
    return Verdict.yes()


@hookimpl
def dispatch_tune_space(op: str, spec: CallSpec) -> TuneSpace:
    configs = tuple(Config.of(chunk=c) for c in (64, 256, 1024))
    return TuneSpace(configs=configs, default=configs[1], tunables=("chunk",))


@hookimpl
def dispatch_kernel(op: str, spec: CallSpec, config: Config):
    chunk = int(config.as_dict().get("chunk", 256))
    return functools.partial(_rowsum, chunk=chunk, keepdim=spec.keepdim)


def _rowsum(input: torch.Tensor, mask: torch.Tensor | None, *, chunk: int, keepdim: bool) -> torch.Tensor:
    # an absent mask gets a cached int8 stand-in (the kernel keeps one signature) that is never read
    has_mask = mask is not None
    mask = mask if has_mask else placeholder(input, torch.int8)
    n = input.shape[-1]
    acc = torch.zeros(input.shape[:-1], dtype=torch.float32, device=input.device)
    for start in range(0, n, chunk):
        part = input[..., start:start + chunk].float()
        if has_mask:
            part = part * (mask[..., start:start + chunk] != 0)
        acc += part.sum(-1)
    out = acc.to(input.dtype)
    return out.unsqueeze(-1) if keepdim else out
