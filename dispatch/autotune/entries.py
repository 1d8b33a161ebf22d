"""The schema of cache entries: what a decision and a tune result hold, checked before any use.

An entry is a key (a mapping of str to str whose ``kind`` is ``"decision"`` or ``"tune"``) and a
value. A decision value holds ``backend`` (a non-empty str) and optionally ``config`` (a mapping
of str to a JSON scalar), ``reason`` (str), ``timings`` (backend name -> median in us),
``spread_us`` (the winner's spread in us) and ``reraced`` (bool). A tune value holds ``config``
and ``latency_us`` and optionally ``spread_us``, ``timings`` (a list of ``{"config", "median_us",
"spread_us", "reps"}``), ``failures`` (a list of ``{"config", "reason"}``), ``source`` (str), and ``compile_s`` and
``timing_s`` (the seconds the tune spent compiling candidates, and timing them).
Numbers are finite and >= 0 (never a bool). Fields not named here are kept and ignored.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

KINDS = ("decision", "tune")


class EntryError(ValueError):
    """A cache entry that does not fit the schema; the message names the field and the value."""


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except RecursionError:
        return f"a {type(value).__name__} nested too deeply"
    return text if len(text) <= 60 else text[:57] + "..."


def check_key(key: Any) -> dict[str, str]:
    """``key`` as a dict, if it maps str to str and names a known ``kind``; else EntryError."""
    if not isinstance(key, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in key.items()):
        raise EntryError(f"'key' must map str to str (got {_short(key)})")
    if key.get("kind") not in KINDS:
        raise EntryError(f"'key.kind' must be one of {', '.join(KINDS)} (got {_short(key.get('kind'))})")
    return dict(key)


def _number(where: str, value: Any) -> float:
    try:  # (an int too large for a float: OverflowError)
        ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value >= 0
    except OverflowError:
        ok = False
    if not ok:
        raise EntryError(f"'{where}' must be a finite number >= 0 (got {_short(value)})")
    return float(value)


def _text(where: str, value: Any, nonempty: bool = False) -> str:
    if not isinstance(value, str) or (nonempty and not value):
        raise EntryError(f"'{where}' must be a{' non-empty' if nonempty else ''} str (got {_short(value)})")
    return value


def _config(where: str, value: Any) -> None:
    if not isinstance(value, Mapping):
        raise EntryError(f"'{where}' must be a mapping of names to values (got {_short(value)})")
    for name, item in value.items():
        if not isinstance(name, str):
            raise EntryError(f"'{where}' names must be str (got {_short(name)})")
        if item is not None and not isinstance(item, (str, int, float, bool)) or (
                isinstance(item, float) and not math.isfinite(item)):
            raise EntryError(f"'{where}.{name}' must be a str, number, bool or null (got {_short(item)})")


def _optional(value: Mapping[str, Any], field: str, check: Callable[[str, Any], Any]) -> None:
    if field in value:
        check(field, value[field])


def _records(where: str, value: Any, fields: Mapping[str, Callable[[str, Any], Any]],
             required: tuple[str, ...]) -> None:
    if not isinstance(value, list):
        raise EntryError(f"'{where}' must be a list (got {_short(value)})")
    for i, record in enumerate(value):
        if not isinstance(record, Mapping):
            raise EntryError(f"'{where}[{i}]' must be an object (got {_short(record)})")
        for name, check in fields.items():
            if name in record:
                check(f"{where}[{i}].{name}", record[name])
            elif name in required:
                raise EntryError(f"'{where}[{i}]' lacks '{name}'")


def _reps(where: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EntryError(f"'{where}' must be an int >= 0 (got {_short(value)})")


def _timings_by_name(where: str, value: Any) -> None:
    if not isinstance(value, Mapping):
        raise EntryError(f"'{where}' must map backend names to microseconds (got {_short(value)})")
    for name, us in value.items():
        _number(f"{where}.{name}", us)


def _flag(where: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise EntryError(f"'{where}' must be true or false (got {_short(value)})")


def check_decision(value: Mapping[str, Any]) -> None:
    """Raise EntryError unless ``value`` is a decision entry's value."""
    if "backend" not in value:
        raise EntryError("a decision lacks 'backend'")
    _text("backend", value["backend"], nonempty=True)
    _optional(value, "config", _config)
    _optional(value, "reason", _text)
    _optional(value, "timings", _timings_by_name)
    _optional(value, "spread_us", _number)
    _optional(value, "reraced", _flag)


def check_tune(value: Mapping[str, Any]) -> None:
    """Raise EntryError unless ``value`` is a tune result's value (``TuneResult.to_json``)."""
    for field in ("config", "latency_us"):
        if field not in value:
            raise EntryError(f"a tune result lacks '{field}'")
    _config("config", value["config"])
    _number("latency_us", value["latency_us"])
    _optional(value, "spread_us", _number)
    _optional(value, "source", _text)
    _optional(value, "compile_s", _number)
    _optional(value, "timing_s", _number)
    if "timings" in value:
        _records("timings", value["timings"],
                 {"config": _config, "median_us": _number, "spread_us": _number, "reps": _reps},
                 required=("config", "median_us"))
    if "failures" in value:
        _records("failures", value["failures"], {"config": _config, "reason": _text}, required=("config", "reason"))


def check_entry(key: Any, value: Any) -> tuple[dict[str, str], dict[str, Any]]:
    """``(key, value)`` as dicts if they fit the schema of the key's kind; else EntryError."""
    key = check_key(key)
    if not isinstance(value, Mapping):
        raise EntryError(f"'value' must be an object (got {_short(value)})")
    (check_decision if key["kind"] == "decision" else check_tune)(value)
    if key["kind"] == "decision" and "candidates" in key and value["backend"] not in candidate_names(key):
        # (no call of this key can be served by it: it would never be used)
        raise EntryError(f"the decision's backend {value['backend']!r} is not one of its key's candidates "
                         f"({', '.join(sorted(candidate_names(key))) or 'none'})")
    return key, dict(value)


def candidate_names(key: Mapping[str, str]) -> frozenset[str]:
    """The backend names of a decision key's ``candidates`` (``name=version,...``)."""
    return frozenset(item.partition("=")[0] for item in key.get("candidates", "").split(",") if item)
