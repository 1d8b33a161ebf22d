"""``torch.autocast`` for declared ops: a call made under autocast is served as the call torch makes.

Under ``torch.autocast("cuda")`` torch runs ``softmax`` of a bfloat16 tensor as
``softmax(x, dtype=torch.float32)`` and ``layer_norm`` on its tensors cast to float32: both return
float32. A kernel given the bfloat16 call would return bfloat16, so an op declares torch's policy
for it (``OpDecl.autocast``, by device type) and a call under autocast is recast the same way,
then dispatched as that call, to its own kernel:

* ``"fp32"``: each floating tensor of half precision (not float32, not float64) on the device is
  cast to float32 (torch's ``fp32`` list: layer_norm, logsumexp, ...);
* ``"fp32_set_opt_dtype"``: ``dtype=torch.float32`` when no ``dtype`` is given and the first
  tensor is such a tensor (softmax, log_softmax).

An op that declares ``autocast_in_kernel`` (the norms) has its ``"fp32"`` calls served without the
copy of its first tensor: the kernel reads it in half precision and writes float32
(:func:`in_kernel`), the same result with fewer bytes moved (torch.compile fuses the same cast).

Whether autocast is on for the call's device is part of its key (a flag of the native tensor key;
a part of the Python key for ops that declare a policy), so calls inside and outside an autocast
region resolve apart, and a resolved call pays nothing for it. ``out=`` calls are left as they are
(torch's autocast does not touch its ``out=`` overloads).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

AUTOCAST_POLICIES = ("fp32", "fp32_set_opt_dtype")
AUTOCAST_DEVICE_TYPES = ("cuda", "cpu")  # the device types the native key reads autocast's state for

_LOW = frozenset((torch.float16, torch.bfloat16))


def _low_precision(t: Any, device_type: str) -> bool:
    """Whether torch's autocast casts ``t`` to float32 (a floating tensor on the device, below float32)."""
    return isinstance(t, torch.Tensor) and t.device.type == device_type and t.dtype in _LOW


def torch_policy(aten_op: str, policy: str) -> dict[str, str]:
    """``{"cuda": policy}`` where the torch in use has a CUDA autocast kernel for ``aten_op`` (its
    policy for a built-in op), else none: the lists change between torch versions (rms_norm is
    autocast to float32 by torch 2.13, left as it is by torch 2.11)."""
    try:
        registered = torch._C._dispatch_has_kernel_for_dispatch_key(aten_op, "AutocastCUDA")
    except (AttributeError, RuntimeError):
        registered = False
    return {"cuda": policy} if registered else {}


def on_for(t: Any) -> bool:
    """Whether torch.autocast is on for tensor ``t``'s device type (one of AUTOCAST_DEVICE_TYPES)."""
    return isinstance(t, torch.Tensor) and t.device.type in AUTOCAST_DEVICE_TYPES and \
        torch.is_autocast_enabled(t.device.type)


def leave_as_is(t: torch.Tensor) -> torch.autocast:
    """A context where calls on ``t``'s device type are not recast: an ``out=`` call, or the call a
    compiled graph's custom op makes (torch's autocast leaves both as they are)."""
    return torch.autocast(t.device.type, enabled=False)


def recast(decl, values: dict[str, Any]) -> dict[str, Any] | None:
    """The call's arguments as torch's autocast gives them (None where it leaves the call as it is)."""
    first = values.get(decl.tensors[0].name)
    if not isinstance(first, torch.Tensor):
        return None  # (a bad argument: the call raises torch's error)
    device_type = first.device.type
    policy = dict(decl.autocast).get(device_type)
    if policy is None or not torch.is_autocast_enabled(device_type):
        return None
    if policy == "fp32_set_opt_dtype":
        if values.get("dtype") is None and _low_precision(first, device_type):
            return {**values, "dtype": torch.float32}
        return None
    cast = {t.name: values[t.name].float() for t in decl.tensors if _low_precision(values.get(t.name), device_type)}
    return {**values, **cast} if cast else None


def in_kernel(decl, values: dict[str, Any], recast_values: dict[str, Any]) -> dict[str, Any] | None:
    """``recast_values`` with the first tensor as the call gave it, where the op's kernels read it
    in half precision and write float32 (``OpDecl.autocast_in_kernel``) and autocast cast it; else None.
    The call is then made with ``out_dtype=torch.float32`` (``OpDecl.spec``)."""
    first = decl.tensors[0].name
    if not decl.autocast_in_kernel or recast_values.get(first) is values.get(first):
        return None
    return {**recast_values, first: values[first]}


def traced_recast(decl) -> tuple[str, dict[str, Any]]:
    """:func:`recast` as lines of the stand-in Dynamo traces for a compiled call (its body's
    indentation; they rebind the stand-in's arguments), with the op's policies written in as
    constants, and the names those lines read. Dynamo guards on what a traced function reads: this
    form reads the tensors and autocast's state (which Dynamo guards anyway), not the declaration.
    For an op read in the kernel, they set ``_ac_out_dtype`` (None before them: the stand-in's first
    line) to the result's dtype where the first tensor is left in half precision; the node's ``args``
    carry it."""
    first = decl.tensors[0].name
    lines = [f"    if isinstance({first}, _ac_Tensor):"]
    for i, (device_type, policy) in enumerate(decl.autocast):
        lines.append(f"        {'el' if i else ''}if {first}.device.type == {device_type!r} and "
                     f"_ac_enabled({device_type!r}):")
        if policy == "fp32_set_opt_dtype":
            lines.append(f"            if dtype is None and _ac_low({first}, {device_type!r}):")
            lines.append("                dtype = _ac_float32")
            continue
        cast = decl.tensor_names
        if decl.autocast_in_kernel:  # the first tensor read in the kernel: the node's result is float32
            lines.append(f"            if _ac_low({first}, {device_type!r}):")
            lines.append("                _ac_out_dtype = _ac_float32")
            cast = cast[1:]
        lines += [f"            {t} = _ac_up({t}, {device_type!r})" for t in cast]
    names = {"_ac_Tensor": torch.Tensor, "_ac_enabled": torch.is_autocast_enabled, "_ac_low": _low_precision,
             "_ac_float32": torch.float32, "_ac_up": _up}
    return "\n".join(lines) + "\n", names


def _up(t: Any, device_type: str) -> Any:
    """``t`` as torch's autocast hands it to a float32 op: a half-precision tensor on the device cast."""
    return t.float() if _low_precision(t, device_type) else t


def cast_of(decl, values: dict[str, Any], recast_values: dict[str, Any]) -> tuple[int, ...]:
    """The positions of the op's tensors that ``recast_values`` holds cast (float32 copies)."""
    return tuple(i for i, name in enumerate(decl.tensor_names) if recast_values[name] is not values[name])


def through(function: Callable[..., torch.Tensor], decl, recast_values: dict[str, Any], cast: tuple[int, ...],
            backend: str | None) -> Callable[..., torch.Tensor]:
    """``fn(*tensors)`` for a call key met under autocast: the call recast as ``recast_values`` were
    (the tensors at positions ``cast`` cast to float32, the other arguments as they hold them: the
    same ``dtype`` set; the key holds the call's dtypes and other arguments), made through
    ``function``, the op function, where the recast call resolves under a key of its own."""
    names = decl.tensor_names
    fixed = {name: v for name, v in recast_values.items() if name not in names}

    def autocast_call(*tensors: torch.Tensor | None) -> torch.Tensor:
        args = dict(fixed)
        args.update(zip(names, (t.float() if i in cast else t for i, t in enumerate(tensors))))
        return function(**args, backend=backend)

    return autocast_call
