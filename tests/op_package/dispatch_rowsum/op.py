"""The declaration of ``masked_rowsum(input, mask=None, keepdim=False)``."""

from __future__ import annotations

import torch

from dispatch.backend import OpDecl, TensorArg, hookimpl


def parse(input: torch.Tensor, mask: torch.Tensor | None = None, keepdim: bool = False) -> dict:
    """Check the arguments as a torch op would; return the op's attributes."""
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"masked_rowsum(): argument 'input' must be Tensor, not {type(input).__name__}")
    if input.dim() < 1:
        raise IndexError("masked_rowsum(): 'input' must have at least one dim (got a 0-d tensor)")
    if not input.dtype.is_floating_point:
        raise TypeError(f"masked_rowsum(): 'input' must be a floating tensor (got {input.dtype})")
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.int8:
            raise TypeError(f"masked_rowsum(): 'mask' must be an int8 Tensor or None (got {getattr(mask, 'dtype', mask)})")
        if mask.shape != input.shape:
            raise RuntimeError(f"masked_rowsum(): 'mask' shape {tuple(mask.shape)} must equal "
                               f"the input's {tuple(input.shape)}")
    if not isinstance(keepdim, bool):
        raise TypeError(f"masked_rowsum(): argument 'keepdim' must be bool, not {type(keepdim).__name__}")
    return {"keepdim": keepdim}


def reference(spec):
    keepdim = spec.keepdim

    def rowsum(input, mask=None):
        x = input if mask is None else input * (mask != 0)
        return x.sum(-1, keepdim=keepdim, dtype=torch.float32 if input.dtype in (torch.float16, torch.bfloat16)
                     else None).to(input.dtype)
    return rowsum


def output(spec):
    shape = spec.shape[:-1] + ((1,) if spec.keepdim else ())
    return shape, spec.dtype


def backward(spec):
    keepdim = spec.keepdim

    def grads(grad, input, mask, out):
        g = grad if keepdim else grad.unsqueeze(-1)
        g = g.expand(input.shape)
        if mask is not None:
            g = g * (mask != 0)
        return g.to(input.dtype), None
    return grads


def bucket(spec) -> str:
    n = spec.shape[-1]
    p = 1
    while p < n:
        p *= 2
    return f"N<={p}," + ("masked" if spec.tensor("mask").present else "unmasked")


def sample(shape, dtype, device, seed=0, masked=True, **options):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen).to(dtype).to(device)
    mask = torch.randint(0, 2, shape, generator=gen, dtype=torch.int8).to(device) if masked else None
    return (x, mask), options


MASKED_ROWSUM = OpDecl(
    name="masked_rowsum", parse=parse,
    tensors=(TensorArg("input"), TensorArg("mask", optional=True, absent_dtype=torch.int8, differentiable=False)),
    reference=reference, output=output, backward=backward, bucket=bucket, sample=sample,
    tolerance=lambda dtype: {torch.float32: (1e-4, 1e-4), torch.float64: (1e-10, 1e-10)}.get(dtype, (2e-2, 2e-2)),
    doc="Row sums over the last dim, counting only positions where ``mask`` is nonzero.")


@hookimpl
def dispatch_ops():
    return [MASKED_ROWSUM]
