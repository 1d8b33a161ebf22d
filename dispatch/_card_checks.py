"""Validators of the backend card's fields: each names the field, what it must be, and what it got."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any


def kind_of(kind: type, what: str = ""):
    """attrs' ``instance_of`` with a message of one line: ``'name' must be a str (got 123)`` (attrs'
    own shows a tuple holding the whole attribute's repr). ``what``: how to say the kind, where its
    name would not ("a dispatch.Verdict, like Verdict.yes()")."""
    said = what or ("a torch.dtype" if kind is torch_dtype() else f"a {kind.__name__}")

    def check(_instance: Any, attribute: Any, value: Any) -> None:
        if not isinstance(value, kind):
            raise TypeError(f"'{attribute.name}' must be {said} (got {value!r})")
    return check


def torch_dtype() -> type:
    import torch

    return torch.dtype


def frozen_mapping(value: Any) -> Any:
    """A read-only copy of a mapping; anything else passes through for the validator to name."""
    return MappingProxyType(dict(value)) if isinstance(value, Mapping) else value


def frozen_set(value: Any) -> Any:
    """A frozenset of a collection; a str or a non-collection passes through for the validator to name."""
    return frozenset(value) if isinstance(value, Iterable) and not isinstance(value, str) else value


def op_collection(_instance: Any, attribute: Any, value: Any) -> None:
    """A collection of op names (``ops="softmax"`` would be a set of letters)."""
    if not isinstance(value, frozenset) or not all(isinstance(op, str) for op in value):
        raise TypeError(f"'{attribute.name}' must be a collection of op names, like ('softmax', 'logsumexp') "
                        f"(got {value!r})")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _device_type(text: str) -> bool:
    """``text`` names a device type torch knows (``cuda``, ``cpu``, ``mps``...): a typo would be a
    figure or a rank that never applies."""
    import torch

    try:
        return torch.device(text).type == text
    except (RuntimeError, ValueError):
        return False


def _unknown_device_type(attribute: Any, keys: Iterable[str]) -> None:
    bad = next((k for k in keys if not _device_type(k.split(":")[0])), None)
    if bad is not None:
        raise ValueError(f"'{attribute.name}' keys must start with a device type torch knows, like 'cuda' or 'cpu' "
                         f"(got {bad!r}): a misspelt one would never apply")


def priorities(_instance: Any, attribute: Any, value: Any) -> None:
    """``{device type (str): rank (int)}``; a bool, a float (NaN included) or a str is refused, and
    a device type torch does not know."""
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and _is_int(v) for k, v in value.items()):
        raise TypeError(f"'{attribute.name}' must be a mapping of device type (str) to an int rank, "
                        f"like {{'cuda': 100, 'cpu': 0}} (got {_shown(value)})")
    _unknown_device_type(attribute, value)


def string_mapping(_instance: Any, attribute: Any, value: Any) -> None:
    """``{str: str}``, like ``{'triton': '3.6.0'}``."""
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise TypeError(f"'{attribute.name}' must be a mapping of str to str, like {{'triton': '3.6.0'}} "
                        f"(got {_shown(value)})")


#: A card's figure for calls its backend should serve only when nothing with figures does (or a race
#: or table picks it): its estimated cost is infinite, so the estimate ranks it after every other.
LAST = "last"


def costs(_instance: Any, attribute: Any, value: Any) -> None:
    """``{device type, "device type:op", "device type:op:grad", "device type:strided",
    "device type:op:strided", "device type:long", "device type:op:long", "device type:cast" or
    "device type:op:cast" (str): (launch us, GB/s) or (launch us, GB/s, row ns), or "last"}``,
    finite, us >= 0, GB/s > 0, row ns >= 0; ``"last"``: such calls rank after every figure."""
    import math

    def ok(v: Any) -> bool:
        return v == LAST or (isinstance(v, tuple) and len(v) in (2, 3)
                and all(isinstance(n, (int, float)) and not isinstance(n, bool) and math.isfinite(n) for n in v)
                and v[0] >= 0 and v[1] > 0 and (len(v) == 2 or v[2] >= 0))

    if not isinstance(value, Mapping) or not all(isinstance(k, str) and ok(v) for k, v in value.items()):
        raise TypeError(f"'{attribute.name}' must be a mapping of device type (str) to (launch us, GB/s), "
                        f"(launch us, GB/s, ns per element of a row) or {LAST!r}, like {{'cuda': (16.0, 3500.0)}} "
                        f"(got {_shown(value)})")
    _unknown_device_type(attribute, value)


def text(_instance: Any, attribute: Any, value: Any) -> None:
    """A str (attrs' own check raises a tuple that shows the attribute's repr)."""
    if not isinstance(value, str):
        raise TypeError(f"'{attribute.name}' must be a str (got {value!r}, of type {type(value).__name__})")


def exact_bool(_instance: Any, attribute: Any, value: Any) -> None:
    """True or False, not a truthy stand-in."""
    if not isinstance(value, bool):
        raise TypeError(f"'{attribute.name}' must be True or False (got {value!r})")


def _shown(value: Any) -> str:
    return repr(dict(value)) if isinstance(value, MappingProxyType) else repr(value)
