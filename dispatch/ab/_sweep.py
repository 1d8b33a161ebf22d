"""A long sweep of A/B rows that can be split over GPUs, stopped, resumed and merged back together.

A sweep is a JSON file ``{"meta": {...}, "rows": [...]}`` written after every row. Each row is a
dict with at least ``op``, ``dtype``, ``M`` and ``N`` (its case) and ``results``: one entry per
contender (a backend, ``dispatch``, ``torch.compile``), with ``us``, ``spread_us``, ``gbs``,
``pct_copy``, ``rounds_us`` and ``ok`` when it was measured, or ``error`` when it raised.

    cases = take_shard(all_cases, parse_shard("0/2"))          # every 2nd case, from the first
    cases = pending(cases, load_sweep(path)["rows"])           # less those already measured
    timings, errors = interleaved_rounds(runs, rounds=3, measure=lambda fn: measure(fn, device))
    meta, rows = merge_sweeps([load_sweep(a), load_sweep(b)])  # the shards, one file
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

#: The fields that name a row's case: two rows with the same values measured the same thing.
CASE_FIELDS = ("op", "dtype", "M", "N")


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/k"`` -> ``(i, k)``: this process takes every k-th case from the i-th (``0 <= i < k``)."""
    try:
        i, k = (int(v) for v in str(text).split("/"))
    except ValueError:
        raise ValueError(f"'shard' must be i/k with 0 <= i < k, e.g. 0/2 (got {text!r})") from None
    if not 0 <= i < k:
        raise ValueError(f"'shard' must be i/k with 0 <= i < k, e.g. 0/2 (got {text!r})")
    return i, k


def take_shard(cases: Sequence[T], shard: tuple[int, int] | str) -> list[T]:
    """Shard ``(i, k)`` of ``cases``: every k-th from the i-th; the k shards cover each case once."""
    i, k = parse_shard(shard) if isinstance(shard, str) else parse_shard(f"{shard[0]}/{shard[1]}")
    return list(cases)[i::k]


def row_key(row: Mapping[str, Any]) -> tuple:
    """The case a row measured: its ``op``, ``dtype``, ``M`` and ``N``."""
    return tuple(row[f] for f in CASE_FIELDS)


def pending(cases: Iterable[tuple], rows: Iterable[Mapping[str, Any]]) -> list[tuple]:
    """``cases`` (tuples of :data:`CASE_FIELDS`' values) that none of ``rows`` measured, in order."""
    done = {row_key(r) for r in rows}
    return [c for c in cases if tuple(c) not in done]


def read_json(path: Path, what: str, remedy: str) -> Any:
    """The JSON in ``path``; a ValueError naming ``what`` it should be, the file, why, and ``remedy``."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise ValueError(f"{what} {str(path)!r} cannot be read ({type(exc).__name__}: {exc}); {remedy}") from None


def load_sweep(path: str | Path) -> dict[str, Any]:
    """Read a sweep file; a file that is not one raises ``ValueError`` naming it and why."""
    path = Path(path)
    data = read_json(path, "sweep file", "name a file written by a sweep, or move this one away")
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not isinstance(data.get("meta"), dict):
        raise ValueError(f"sweep file {str(path)!r} has no 'meta' object and 'rows' list; "
                         "name a file written by a sweep")
    bad = [i for i, r in enumerate(rows) if not isinstance(r, dict) or not all(f in r for f in CASE_FIELDS)
           or not isinstance(r.get("results"), dict)]
    if bad:
        warnings.warn(f"sweep file {str(path)!r}: skipped {len(bad)} row(s) without "
                      f"{', '.join(CASE_FIELDS)} and 'results' (first: row {bad[0]})", stacklevel=2)
        data = dict(data, rows=[r for i, r in enumerate(rows) if i not in set(bad)])
    return data


def save_sweep(path: str | Path, meta: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> Path:
    """Write the sweep so far to ``path`` (complete or not: a stopped sweep keeps what it measured)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"meta": dict(meta), "rows": list(rows)}, indent=1))
    tmp.replace(path)  # a stop while writing leaves the previous file whole
    return path


def merge_sweeps(sweeps: Sequence[Mapping[str, Any]], sources: Sequence[str] = (),
                 order: Callable[[Mapping[str, Any]], Any] | None = None) -> tuple[dict[str, Any], list[dict]]:
    """Combine sweeps (e.g. the shards of one run) into one ``(meta, rows)``.

    A case measured in several keeps the row of the later sweep; rows keep the copy bandwidth of
    the process that timed them. The first sweep's meta heads the result, with ``command`` joining
    every sweep's command and ``merged_from`` listing ``sources``. Rows are sorted by ``order``
    (a key function) when given, else kept in the order first seen.
    """
    if not sweeps:
        raise ValueError("'sweeps' must hold at least one sweep to merge (got none)")
    by_case: dict[tuple, dict] = {}
    for sweep in sweeps:
        for row in sweep["rows"]:
            by_case[row_key(row)] = row
    rows = list(by_case.values())
    if order is not None:
        rows.sort(key=order)
    meta = dict(sweeps[0]["meta"])
    meta["command"] = " ; ".join(str(s["meta"].get("command", "?")) for s in sweeps)
    if sources:
        meta["merged_from"] = [str(s) for s in sources]
    backends: dict[str, Any] = {}
    for sweep in sweeps:
        backends.update(sweep["meta"].get("backends") or {})
    if backends:
        meta["backends"] = backends
    return meta, rows


def interleaved_rounds(runs: Mapping[str, Callable[[], object]], rounds: int,
                       measure: Callable[[Callable[[], object]], Any]) -> tuple[dict[str, list], dict[str, str]]:
    """Time every contender once per round, rounds interleaved, so drift hits all alike.

    ``measure(fn)`` times one contender (e.g. :func:`dispatch.autotune.measure`) and returns a
    timing with ``median_us``. Returns ``(timings, errors)``: each contender's timings, one per
    round, or the error it raised (it is then not timed again and has no timings).
    """
    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"'rounds' must be an int >= 1 (got {rounds!r})")
    timings: dict[str, list] = {name: [] for name in runs}
    errors: dict[str, str] = {}
    for _ in range(rounds):
        for name in list(timings):
            try:
                timings[name].append(measure(runs[name]))
            except Exception as exc:
                errors[name] = describe_error(exc)
                del timings[name]
    return timings, errors


def median_round(timings: Sequence[Any]) -> Any:
    """The round whose ``median_us`` is the median of the rounds' (the upper one of an even count)."""
    if not timings:
        raise ValueError("'timings' must hold at least one timed round (got none)")
    return sorted(timings, key=lambda t: t.median_us)[len(timings) // 2]


def describe_error(exc: BaseException) -> str:
    """``Type: first line of the message`` (at most 200 characters of it), for a row's ``error``."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text[:200]}"
