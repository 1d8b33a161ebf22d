"""A call's non-tensor arguments as the JSON text a compiled graph's node carries, and back.

Each op's custom op takes, besides its tensors, ``str args``: the call's other arguments (``dim``,
``dtype``, ``backend``...), each tagged with its type, and the nodes' format (:data:`GRAPH_FORMAT`).
A traced call's values are made concrete first (:func:`_concrete`): a text can't carry a symbol.
"""

from __future__ import annotations

import json
import math
import numbers
import operator
from typing import Any

import torch

# the nodes' format, carried in every ``args`` text: torch's caches of compiled graphs key a graph by
# its text, not by the code of the nodes it calls, so a change to the nodes' schemas or to what they
# return changes this number, and a graph compiled for other nodes is never taken from the cache
GRAPH_FORMAT = 2
_FORMAT = "graph format"  # (not an identifier: no op parameter has this name)


def encode(values: dict[str, Any]) -> str:
    """The call's non-tensor arguments as JSON, each value tagged with its type (and the nodes'
    format, :data:`GRAPH_FORMAT`)."""
    return json.dumps({_FORMAT: _tag(GRAPH_FORMAT), **{k: _tag(v) for k, v in values.items()}}, sort_keys=True)


def decode(text: str) -> dict[str, Any]:
    """The values :func:`encode` took, by name (the format left out)."""
    return {k: _untag(v) for k, v in json.loads(text).items() if k != _FORMAT}


def _tag(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return [type(v).__name__ if v is not None else "none", v]
    if isinstance(v, torch.dtype):
        return ["dtype", str(v).removeprefix("torch.")]
    if isinstance(v, (list, tuple)):  # a tuple's subclass (torch.Size) as a tuple
        return ["list" if isinstance(v, list) else "tuple", [_tag(e) for e in v]]
    if hasattr(v, "__index__"):
        return ["int", int(v.__index__())]
    if isinstance(v, numbers.Real):  # numpy's floats
        return ["float", float(v)]
    raise TypeError(f"an argument of type {type(v).__name__} ({v!r}) cannot be passed through a compiled graph; "
                    "use an int, float, bool, str, torch.dtype, None, or a list/tuple of them")


def _untag(tagged: list) -> Any:
    kind, v = tagged
    if kind == "dtype":
        return getattr(torch, v)
    if kind in ("list", "tuple"):
        items = [_untag(e) for e in v]
        return items if kind == "list" else tuple(items)
    return {"none": lambda _: None, "bool": bool, "int": int, "float": float, "str": str}[kind](v)


def _concrete(v: Any) -> Any:
    """``v`` with every symbolic int made an int and every symbolic float a float (traced by Dynamo,
    which then guards on its value: a call whose ``normalized_shape`` is read off a dynamic input
    recompiles for a new size, and one given a new ``eps`` for it, as a text argument can't carry
    a symbol)."""
    if isinstance(v, dict):
        return {k: _concrete(e) for k, e in v.items()}
    if isinstance(v, (list, tuple)):
        items = [_concrete(e) for e in v]
        return items if isinstance(v, list) else tuple(items)
    if type(v).__module__ == "numpy" and getattr(v, "ndim", None) == 0:  # a NumPy scalar (torch takes one as a dim)
        return _concrete(v.tolist())  # (what Dynamo folds: int() and operator.index() of one it does not)
    if isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool):  # Dynamo sees a symbolic int as an int
        return operator.index(v)  # Dynamo specializes here (int() would leave it symbolic)
    if isinstance(v, float):  # Dynamo sees a symbolic float as a float (a float argument, eps, on its second value)
        return math.fsum((v,))  # Dynamo specializes here (float() would leave it symbolic); the float itself
    return v
