"""Stand-ins for absent optional tensor arguments that keep autotune cache keys stable.

Triton's autotuner appends ``str(arg.dtype)`` of every tensor argument to its cache key. A kernel
with an optional tensor (a mask, a bias, an argmax buffer) must therefore pass, when the tensor is
absent, a stand-in of the *same dtype* the real tensor would have: an int8 mask's stand-in is int8,
never the input tensor. Stand-ins are cached per (device, dtype, shape) so that a call allocates
nothing after the first.
"""

from __future__ import annotations

import threading

import torch

_LOCK = threading.Lock()
_CACHE: dict[tuple[torch.device, torch.dtype, tuple[int, ...]], torch.Tensor] = {}


def placeholder(like: torch.Tensor, dtype: torch.dtype, shape: tuple[int, ...] = (1,)) -> torch.Tensor:
    """Return a cached tensor of ``dtype`` and ``shape`` on ``like``'s device.

    ``like`` is any tensor of the call (it only fixes the device). The stand-in's contents are
    zeros and must never be read by a kernel whose toggle says the argument is absent.
    """
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"'dtype' must be a torch.dtype (got {dtype!r})")
    key = (like.device, dtype, tuple(shape))
    found = _CACHE.get(key)
    if found is None:
        with _LOCK:
            found = _CACHE.get(key)
            if found is None:
                found = torch.zeros(shape, dtype=dtype, device=like.device)
                _CACHE[key] = found
    return found
