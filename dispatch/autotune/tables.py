"""Shipped decision tables: raced decisions for known GPU models, read from JSON files in the package.

A table is one JSON file ``{"format": "dispatch-decision-table", "schema": N, "device": ...,
"command": ..., "created": ..., "entries": [{"key": {...}, "value": {...}}, ...]}``; its entries are
decision entries of the cache's schema (:mod:`.entries`), made by ``python -m dispatch tune --sweep
SPEC --export FILE`` from the same races as a user's tune. Tables are read from
``$DISPATCH_TABLES_DIR`` if set, else from the package's ``dispatch/tables/`` folder.

What an entry must match to serve a call (see :func:`match_key`): op, device name, dtype,
out_dtype, the other tensors, shape bucket, ``timing``, and the *names* of the backends that serve
the call (the same set that was raced). Backend versions are not matched, since they change with
every release; an entry whose chosen backend does not serve the call is not used. An entry of
another device is never used. A table that cannot be read, or an entry that does not fit the
schema, is one :class:`~.cache.CacheWarning` and is ignored, never an error.
"""

from __future__ import annotations

import json
import os
import re
import threading
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attrs import frozen

from .cache import SCHEMA, CacheWarning, write_atomically
from .entries import EntryError, candidate_names, check_entry

ENV_TABLES_DIR = "DISPATCH_TABLES_DIR"
FORMAT = "dispatch-decision-table"


def default_tables_dir() -> Path:
    """``$DISPATCH_TABLES_DIR`` if set, else the package's own ``dispatch/tables/`` folder."""
    env = os.environ.get(ENV_TABLES_DIR)
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parent.parent / "tables"


def device_slug(device: str) -> str:
    """A file name for a device name: ``"NVIDIA H200"`` -> ``"nvidia-h200"``."""
    return re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-") or "device"


def match_key(key: Mapping[str, str]) -> str:
    """What a table entry and a call must share: the decision key without backend versions."""
    fields = {k: v for k, v in key.items() if k not in ("kind", "candidates")}
    fields["timing"] = key.get("timing", "wall")
    fields["candidates"] = ",".join(sorted(candidate_names(key)))
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


@frozen
class ShippedDecision:
    """A decision found in a table: the entry's value and the file it came from."""

    value: dict[str, Any]
    file: str


def _check_table(data: Any) -> tuple[str, list]:
    if not isinstance(data, dict):
        raise ValueError(f"a table must be a JSON object (got {data!r:.60})")
    if data.get("format") != FORMAT:
        raise ValueError(f"'format' must be {FORMAT!r} (got {data.get('format')!r:.60})")
    if data.get("schema") != SCHEMA:
        raise ValueError(f"'schema' must be {SCHEMA} (got {data.get('schema')!r:.60})")
    if not isinstance(data.get("device"), str) or not data["device"]:
        raise ValueError(f"'device' must be a non-empty str (got {data.get('device')!r:.60})")
    if not isinstance(data.get("entries"), list):
        raise ValueError(f"'entries' must be a list (got {data.get('entries')!r:.60})")
    return data["device"], data["entries"]


def check_table_entry(device: str, entry: Any) -> tuple[dict[str, str], dict[str, Any]]:
    """``(key, value)`` of a table entry if it is a decision of ``device`` whose backend is among its
    candidates; else EntryError naming what is wrong."""
    if not isinstance(entry, dict):
        raise EntryError(f"an entry must be {{'key': {{...}}, 'value': {{...}}}} (got {str(entry)[:60]})")
    key, value = check_entry(entry.get("key"), entry.get("value"))
    if key["kind"] != "decision":
        raise EntryError(f"'key.kind' must be 'decision' in a table (got {key['kind']!r})")
    if key.get("device") != device:
        raise EntryError(f"'key.device' must be the table's device {device!r} (got {key.get('device')!r})")
    if not candidate_names(key):  # (check_entry: a backend outside them; a table's entry must name them)
        raise EntryError("'key.candidates' must name the backends the entry was raced among (got none)")
    return key, value


class ShippedTables:
    """The decision tables of one directory, indexed by :func:`match_key`; read again when a file
    there changes, and each problem warned about once per file version."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self._index: dict[str, ShippedDecision] = {}
        self._seen: tuple | None = None  # (name, mtime, size) of each table the index was built from
        self._lock = threading.Lock()
        self._warned: set[tuple] = set()
        self.rejected: dict[str, str] = {}  # a file, or its bad entries -> why (from the last read)

    def _reject(self, where: str, version: tuple, why: str) -> None:
        self.rejected[where] = why
        if (where, version, why) not in self._warned:
            self._warned.add((where, version, why))
            warnings.warn(f"ignoring shipped decision table {where} ({why})", CacheWarning, stacklevel=6)

    def _files(self) -> tuple:
        try:
            if not self.directory.is_dir():
                if os.environ.get(ENV_TABLES_DIR):  # the user named it: say it holds no tables
                    self._reject(str(self.directory), (), f"${ENV_TABLES_DIR} names no folder: no shipped "
                                 "decisions are read; unset it for the package's own tables")
                return ()
            paths = sorted(self.directory.glob("*.json"))
        except OSError as exc:
            self._reject(str(self.directory), (), f"cannot list it: {type(exc).__name__}: {exc}")
            return ()
        found = []
        for path in paths:
            try:
                stat = path.stat()
                found.append((path, stat.st_mtime_ns, stat.st_size))
            except OSError:
                found.append((path, None, None))
        return tuple(found)

    def _load(self, files: tuple) -> dict[str, ShippedDecision]:
        index: dict[str, ShippedDecision] = {}
        self.rejected = {}
        for path, *version in files:
            try:
                device, entries = _check_table(json.loads(path.read_text()))
            except RecursionError:
                self._reject(str(path), tuple(version), "nested too deeply to be a decision table")
                continue
            except (OSError, ValueError, UnicodeDecodeError) as exc:
                self._reject(str(path), tuple(version), f"{type(exc).__name__}: {exc}")
                continue
            bad = []
            for i, entry in enumerate(entries):
                try:
                    key, value = check_table_entry(device, entry)
                except (EntryError, RecursionError) as exc:
                    bad.append(f"entry {i}: {exc if isinstance(exc, EntryError) else 'nested too deeply'}")
                    continue
                index.setdefault(match_key(key), ShippedDecision(value, path.name))
            if bad:
                self._reject(f"{path} ({len(bad)} of {len(entries)} entries)", tuple(version), "; ".join(bad[:5])
                             + ("; ..." if len(bad) > 5 else "") + "; its other entries are used")
        return index

    def _current(self) -> dict[str, ShippedDecision]:
        files = self._files()
        with self._lock:
            if files != self._seen:
                self._index, self._seen = self._load(files), files
            return self._index

    def lookup(self, key: Mapping[str, str]) -> ShippedDecision | None:
        """The shipped decision for a decision ``key``, or None."""
        return self._current().get(match_key(key))

    def __len__(self) -> int:
        return len(self._current())


_tables: dict[Path, ShippedTables] = {}
_tables_lock = threading.Lock()


def shipped_tables() -> ShippedTables:
    """The process's tables for :func:`default_tables_dir` (read again when the env var changes)."""
    directory = default_tables_dir()
    with _tables_lock:
        tables = _tables.get(directory)
        if tables is None:
            tables = _tables[directory] = ShippedTables(directory)
        return tables


def write_table(file: Path | str, device: str, entries: list[tuple[dict[str, str], dict[str, Any]]],
                command: str, created: str) -> int:
    """Write a table of ``entries`` (decision keys and values of ``device``) to ``file``; return how
    many. Each entry is checked as a reader will check it; the file is replaced atomically."""
    checked = [check_table_entry(device, {"key": k, "value": v}) for k, v in entries]
    target = Path(file)
    if target.is_dir():
        raise ValueError(f"'--export' must be a file to write, not a directory (got {str(target)!r}; "
                         f"try {str(target / (device_slug(device) + '.json'))!r})")
    payload = {"format": FORMAT, "schema": SCHEMA, "device": device, "command": command, "created": created,
               "entries": [{"key": k, "value": v} for k, v in sorted(checked, key=lambda e: match_key(e[0]))]}
    write_atomically(target, json.dumps(payload, sort_keys=True, indent=1) + "\n")
    return len(checked)
