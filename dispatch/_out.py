"""``out=``: an op's result written into the caller's tensor, with torch's checks and resizing rule.

Torch's own op checks the call first on meta tensors (no data, no compute), so an ``out`` that
torch refuses raises torch's exception; then the op runs through dispatch as usual and its result
is copied into ``out``, resized first as torch resizes it (with torch's warning when ``out`` held
elements). Calls without ``out=`` never come here.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

_TORCH: dict[str, Callable[..., torch.Tensor]] = {
    "softmax": torch.softmax, "log_softmax": torch.log_softmax, "logsumexp": torch.logsumexp}


def with_out(op: str, run: Callable[[], torch.Tensor], input, dim, third, out) -> torch.Tensor:
    """Check ``out`` as torch would, call ``run()`` (the op without ``out``) and write its result into
    ``out``; ``third`` is ``dtype`` for softmax/log_softmax and ``keepdim`` for logsumexp."""
    if isinstance(input, torch.Tensor) and input.layout == torch.strided:
        _check_like_torch(op, input, dim, third, out)
        if op != "logsumexp" and isinstance(third, torch.dtype | None) and out.dtype != (third or input.dtype):
            # torch's meta check lets this through; its real kernel refuses it
            raise RuntimeError(f"{op}(): 'out' must have the result's dtype {third or input.dtype} (got "
                               f"{out.dtype}); pass an out of that dtype, or dtype={out.dtype} to compute in it")
    result = run()  # a bad input raises torch's exception here, as without out=
    if out.device != result.device:
        raise RuntimeError(f"{op}(): 'out' must be on the input's device {result.device} (got a tensor on "
                           f"{out.device}); pass out=torch.empty(0, device={str(result.device)!r})")
    if out.shape != result.shape:
        if out.numel() != 0:
            warnings.warn(f"An output with one or more elements was resized since it had shape {list(out.shape)}, "
                          f"which does not match the required output shape {list(result.shape)}. This behavior "
                          "is deprecated, and in a future PyTorch release outputs will not be resized unless "
                          "they have zero elements. You can explicitly reuse an out tensor t by resizing it, "
                          "inplace, to zero elements with t.resize_(0).", UserWarning, stacklevel=3)
        out.resize_(result.shape)
    out.copy_(result)
    return out


def _check_like_torch(op: str, input: torch.Tensor, dim, third, out) -> None:
    """Run torch's op on meta stand-ins of ``input`` and ``out``: it raises what torch would raise."""
    meta_in = torch.empty_strided(input.shape, input.stride(), dtype=input.dtype, device="meta")
    if input.requires_grad:
        meta_in.requires_grad_()
    meta_out = out
    if isinstance(out, torch.Tensor):
        meta_out = torch.empty_strided(out.shape, out.stride(), dtype=out.dtype, device="meta")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's resize warning is given once, for the real out
        if op == "logsumexp":
            _TORCH[op](meta_in, dim, third, out=meta_out)
        else:
            _TORCH[op](meta_in, dim, dtype=third, out=meta_out)
