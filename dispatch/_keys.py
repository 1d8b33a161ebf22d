"""Cache keys: shape buckets, device names, and the keys of tune results and decisions.

Bucketing, so that dynamic shapes don't re-tune: the reduced length N goes to the next power of
two; the number of rows M to the next power of four (coarse: the batch matters less). A decision
made for one shape serves every shape of its bucket.
"""

from __future__ import annotations

import functools
import platform

import torch

from ._spec import CallSpec, dtype_name


def _next_pow(n: int, base: int) -> int:
    p = 1
    while p < n:
        p *= base
    return p


def shape_bucket(spec: CallSpec) -> str:
    """``"M<=m,N<=n,layout"``: the bucket ``spec`` falls in; ``layout`` is lastdim/strided/other."""
    if spec.last_dim_contiguous:
        layout = "lastdim"
    elif len(spec.dims) == 1:
        layout = f"dim{spec.dims[0] - spec.ndim}"
    else:
        layout = "dims" + "".join(str(d) for d in spec.dims) + f"of{spec.ndim}"
    n, m = spec.reduced_size, spec.rows
    return f"M<={_next_pow(m, 4)},N<={_next_pow(n, 2)},{layout}" + (",keepdim" if spec.keepdim else "")


@functools.lru_cache(maxsize=None)
def device_name(device: torch.device) -> str:
    """A name for the hardware behind ``device`` (the GPU model; the CPU's architecture)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{device.type}:{platform.machine() or 'unknown'}"


def spec_key(spec: CallSpec) -> dict[str, str]:
    """The part of every cache key that comes from the call: op, device, dtypes, bucket."""
    return {"op": spec.op, "device": device_name(spec.device), "dtype": dtype_name(spec.dtype),
            "out_dtype": dtype_name(spec.out_dtype), "bucket": shape_bucket(spec)}


def tune_key(spec: CallSpec, backend: str, version: str, versions: dict[str, str]) -> dict[str, str]:
    """Key of one backend's tune result: the call's key plus the backend, its versions and source hash."""
    key = {"kind": "tune", **spec_key(spec), "backend": backend, "backend_version": version}
    key.update({f"v:{k}": str(v) for k, v in sorted(versions.items())})
    return key


def decision_key(spec: CallSpec, candidates: dict[str, str]) -> dict[str, str]:
    """Key of the choice between backends: the call's key plus every candidate and its version."""
    return {"kind": "decision", **spec_key(spec),
            "candidates": ",".join(f"{name}={version}" for name, version in sorted(candidates.items()))}
