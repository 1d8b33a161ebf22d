"""The persistent decision cache: JSON files, atomic writes, safe across processes, never fatal.

One file per entry under ``<cache dir>/v<SCHEMA>/``, named by a hash of the entry's key. A file
holds ``{"schema": N, "key": {...}, "value": {...}}``; everything in it is data (JSON, never
pickle), so a cache copied from elsewhere cannot run code. A file that is truncated, malformed, of
another schema or of another key is ignored with a warning and rewritten by the next decision.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock

SCHEMA = 1
ENV_CACHE_DIR = "DISPATCH_CACHE_DIR"


class CacheWarning(UserWarning):
    """A cache file was ignored (corrupt, stale or foreign); the decision will be made again."""


def default_cache_dir() -> Path:
    """``$DISPATCH_CACHE_DIR`` if set, else the user cache dir (``~/.cache/dispatch`` on Linux)."""
    env = os.environ.get(ENV_CACHE_DIR)
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("dispatch", appauthor=False))


def _key_text(key: Mapping[str, str]) -> str:
    return json.dumps(dict(key), sort_keys=True, separators=(",", ":"))


def _check_key(key: Any) -> dict[str, str]:
    if not isinstance(key, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in key.items()):
        raise ValueError(f"a cache key must map str to str (got {key!r})")
    return dict(key)


class DecisionCache:
    """Entries keyed by a mapping of strings (op, backend, versions, device, dtype, bucket...)."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self._memo: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    @property
    def entries_dir(self) -> Path:
        return self.directory / f"v{SCHEMA}"

    def path_of(self, key: Mapping[str, str]) -> Path:
        digest = hashlib.sha256(_key_text(key).encode()).hexdigest()[:40]
        return self.entries_dir / f"{digest}.json"

    # -- reading ---------------------------------------------------------------------------------

    def get(self, key: Mapping[str, str]) -> dict[str, Any] | None:
        """The value stored under ``key``, or None (missing, or ignored with a CacheWarning)."""
        text = _key_text(key)
        found = self._memo.get(text)
        if found is not None:
            return found
        path = self.path_of(key)
        if not path.exists():
            return None
        entry = self._read(path)
        if entry is None:
            return None
        if _key_text(entry["key"]) != text:
            warnings.warn(f"ignoring cache file {path}: it holds another key (stale); it will be rewritten",
                          CacheWarning, stacklevel=2)
            return None
        with self._lock:
            self._memo[text] = entry["value"]
        return entry["value"]

    def _read(self, path: Path) -> dict[str, Any] | None:
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict) or data.get("schema") != SCHEMA:
                raise ValueError(f"schema {data.get('schema') if isinstance(data, dict) else None!r}, "
                                 f"expected {SCHEMA}")
            _check_key(data.get("key"))
            if not isinstance(data.get("value"), dict):
                raise ValueError("'value' is not an object")
            return data
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            warnings.warn(f"ignoring corrupt cache file {path} ({type(exc).__name__}: {exc}); "
                          "the decision will be made again and rewritten", CacheWarning, stacklevel=3)
            return None

    def entries(self) -> Iterator[tuple[dict[str, str], dict[str, Any]]]:
        """Every readable entry, as (key, value); unreadable files are skipped with a warning."""
        if not self.entries_dir.is_dir():
            return
        for path in sorted(self.entries_dir.glob("*.json")):
            entry = self._read(path)
            if entry is not None:
                yield entry["key"], entry["value"]

    # -- writing ---------------------------------------------------------------------------------

    def put(self, key: Mapping[str, str], value: Mapping[str, Any]) -> Path:
        """Store ``value`` under ``key`` atomically (temp file + rename, under a file lock)."""
        key = _check_key(key)
        payload = json.dumps({"schema": SCHEMA, "key": key, "value": dict(value)}, sort_keys=True, indent=1)
        path = self.path_of(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock"):
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(payload)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        with self._lock:
            self._memo[_key_text(key)] = json.loads(payload)["value"]
        return path

    def clear(self) -> int:
        """Delete every entry; return how many files were removed."""
        removed = 0
        with self._lock:
            self._memo.clear()
        if self.entries_dir.is_dir():
            for path in self.entries_dir.iterdir():
                if path.suffix in (".json", ".lock"):
                    path.unlink(missing_ok=True)
                    removed += path.suffix == ".json"
        return removed

    def forget_memo(self) -> None:
        """Drop what this process remembers, so the next read goes to disk."""
        with self._lock:
            self._memo.clear()

    # -- moving between machines -----------------------------------------------------------------

    def export(self, file: Path | str) -> int:
        """Write every entry to one JSON file; return how many."""
        entries = [{"key": k, "value": v} for k, v in self.entries()]
        Path(file).write_text(json.dumps({"schema": SCHEMA, "entries": entries}, sort_keys=True, indent=1))
        return len(entries)

    def import_(self, file: Path | str) -> tuple[int, int]:
        """Read entries written by :meth:`export`; return (imported, rejected).

        A file that is not such JSON is rejected whole with a warning; an entry that is malformed
        is skipped with a warning. Nothing in the file is executed.
        """
        try:
            data = json.loads(Path(file).read_text())
            if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("entries"), list):
                raise ValueError(f"not a dispatch cache export of schema {SCHEMA}")
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            warnings.warn(f"rejected cache import {file}: {exc}", CacheWarning, stacklevel=2)
            return 0, 1
        imported = rejected = 0
        for i, entry in enumerate(data["entries"]):
            try:
                if not isinstance(entry, dict) or not isinstance(entry.get("value"), dict):
                    raise ValueError("an entry must be {'key': {...}, 'value': {...}}")
                self.put(_check_key(entry.get("key")), entry["value"])
                imported += 1
            except ValueError as exc:
                warnings.warn(f"rejected entry {i} of {file}: {exc}", CacheWarning, stacklevel=2)
                rejected += 1
        return imported, rejected


_caches: dict[Path, DecisionCache] = {}
_caches_lock = threading.Lock()


def default_cache() -> DecisionCache:
    """The process's cache for :func:`default_cache_dir` (re-read when the env var changes)."""
    directory = default_cache_dir()
    with _caches_lock:
        cache = _caches.get(directory)
        if cache is None:
            cache = _caches[directory] = DecisionCache(directory)
        return cache
