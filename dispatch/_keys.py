"""Cache keys: device names, and the keys of tune results and decisions.

Each op declares its shape bucket rule (so that dynamic shapes don't re-tune); a decision made
for one shape serves every shape of its bucket.
"""

from __future__ import annotations

import functools
import platform

import torch

from . import _opdecl
from ._spec import CallSpec, dtype_name

MAX_KEYS_PER_OP = 4096  # the most keys a table of resolved calls keeps (per op): past it, it starts over


def shape_bucket(spec: CallSpec) -> str:
    """The bucket ``spec`` falls in, by its op's declared bucket rule."""
    return _opdecl.get(spec.op).bucket(spec)


@functools.lru_cache(maxsize=None)
def device_name(device: torch.device) -> str:
    """A name for the hardware behind ``device`` (the GPU model; the CPU's architecture)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{device.type}:{platform.machine() or 'unknown'}"


def resolve_device(device: torch.device | str | None) -> torch.device:
    """``device`` as a torch.device ("auto" or None: cuda where there is one, else cpu); one this
    process can't run on is a ValueError that says what would work."""
    if device is None or device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device {device!r} is not a device torch knows ({exc}); use cpu, cuda, cuda:N "
                         "or auto") from None
    if device.type == "meta":
        raise ValueError(f"device {str(device)!r} holds no data: nothing run there can be checked or timed; use cpu, "
                         "cuda, cuda:N or auto")
    if device.type not in ("cpu", "cuda"):
        try:
            torch.empty(1, device=device)
        except Exception as exc:  # noqa: BLE001 - whatever the device's runtime says: it can't be used here
            said = (str(exc).splitlines() or [""])[0]
            raise ValueError(f"device {str(device)!r} can't be used in this process ({type(exc).__name__}: {said}); "
                             "use cpu, cuda, cuda:N or auto") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            why = "no CUDA device is visible" if torch.backends.cuda.is_built() else "this torch has no CUDA"
            raise ValueError(f"device {str(device)!r}: {why}; use cpu (or auto)")
        if device.index is not None and device.index >= count:
            raise ValueError(f"device {str(device)!r}: there are {count} CUDA device(s), cuda:0..cuda:{count - 1}")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    return device


def device_flag(text: str) -> torch.device:
    """A command line's ``--device``: :func:`resolve_device`, its error naming the flag."""
    try:
        return resolve_device(text)
    except ValueError as exc:
        raise ValueError(f"--device {str(exc).removeprefix('device ')}") from None


def spec_key(spec: CallSpec) -> dict[str, str]:
    """The part of every cache key that comes from the call: op, device, dtypes, bucket."""
    key = {"op": spec.op, "device": device_name(spec.device), "dtype": dtype_name(spec.dtype),
           "out_dtype": dtype_name(spec.out_dtype), "bucket": shape_bucket(spec)}
    if len(spec.tensors) > 1:  # the other tensors: present (with dtype) or absent
        key["tensors"] = ",".join(f"{t.name}:{dtype_name(t.dtype) if t.present else 'absent'}"
                                  for t in spec.tensors[1:])
    return key


def tune_key(spec: CallSpec, backend: str, version: str, versions: dict[str, str],
             timing: str = "wall") -> dict[str, str]:
    """Key of one backend's tune result: the call's key plus the backend, its versions and source
    hash (and ``timing`` when it is not the default ``"wall"``)."""
    key = {"kind": "tune", **spec_key(spec), "backend": backend, "backend_version": version}
    key.update({f"v:{k}": str(v) for k, v in sorted(versions.items())})
    if timing != "wall":
        key["timing"] = timing
    return key


def decision_key(spec: CallSpec, candidates: dict[str, str], timing: str = "wall") -> dict[str, str]:
    """Key of the choice between backends: the call's key plus every candidate and its version
    (and ``timing`` when it is not the default ``"wall"``)."""
    key = {"kind": "decision", **spec_key(spec),
           "candidates": ",".join(f"{name}={version}" for name, version in sorted(candidates.items()))}
    if timing != "wall":
        key["timing"] = timing
    return key
