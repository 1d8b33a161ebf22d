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
                found = _CACHE[key] = lasting_zeros(shape, dtype, like.device)
    return found


def lasting_zeros(shape, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """A zeroed tensor that outlives the call making it (a cached stand-in, a per-stream
    workspace), taken from the device's ordinary memory.

    While torch.compile's CUDA graphs (``mode="reduce-overhead"``) warm a graph up, every
    allocation of the warming thread goes to the graph's private pool, which afterwards must hold
    nothing but the graph's outputs; so on a CUDA device the tensor is allocated on a helper
    thread (for the caller's stream), whose allocations go to the ordinary pool, and zeroed on the
    caller's stream. While the stream is capturing a graph it is allocated as usual: it then
    belongs to that graph (a capture forbids other threads to take new device memory).
    """
    device = torch.device(device)
    if device.type != "cuda" or torch.cuda.is_current_stream_capturing():
        return torch.zeros(shape, dtype=dtype, device=device)
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    stream, made = torch.cuda.current_stream(device), []

    def make() -> None:
        try:
            with torch.cuda.stream(stream):
                made.append(torch.empty(shape, dtype=dtype, device=device))
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            made.append(exc)

    helper = threading.Thread(target=make, name="dispatch-lasting-alloc")
    helper.start()
    helper.join()
    if isinstance(made[0], BaseException):
        raise made[0]
    return made[0].zero_()
