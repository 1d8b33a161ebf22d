"""The persistent decision cache: JSON files, atomic writes, safe across processes, never fatal.

One file per entry under ``<cache dir>/v<SCHEMA>/``, named by a hash of the entry's key. A file
holds ``{"schema": N, "key": {...}, "value": {...}}``; everything in it is data (JSON, never
pickle), so a cache copied from elsewhere cannot run code. Every entry is checked against the
schema of :mod:`dispatch.autotune.entries` when it is read: a file that is truncated, malformed,
nested too deeply, of another schema or key, or whose values have the wrong types is skipped with
one warning, counted in :attr:`DecisionCache.rejected`, and rewritten by the next decision. A
cache that cannot be written is one warning per process and directory; decisions are then kept
in memory.
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

from .entries import check_entry

SCHEMA = 1
ENV_CACHE_DIR = "DISPATCH_CACHE_DIR"
LOCK_TIMEOUT_S = 30.0
NOISY_SPREAD = 0.25  # a raced winner whose spread exceeds this share of its median may be re-raced


class CacheWarning(UserWarning):
    """A cache file was ignored (corrupt, stale or foreign) or could not be written."""


def default_cache_dir() -> Path:
    """``$DISPATCH_CACHE_DIR`` if set, else the user cache dir (``~/.cache/dispatch`` on Linux)."""
    env = os.environ.get(ENV_CACHE_DIR)
    if env and env.strip():
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    default = Path(user_cache_dir("dispatch", appauthor=False))
    if env:
        warnings.warn(f"{ENV_CACHE_DIR}={env!r} is blank: the cache is in {default}", CacheWarning, stacklevel=2)
    return default


def _key_text(key: Mapping[str, str]) -> str:
    return json.dumps(dict(key), sort_keys=True, separators=(",", ":"))


def decision_trusted(value: Mapping[str, Any]) -> bool:
    """Whether a cached decision may be used as it is, rather than raced once more.

    A raced decision is not trusted when its winner's spread is more than ``NOISY_SPREAD`` (25%)
    of the winner's median *and* another backend's median lies within the winner's median plus
    that spread (the noise could have decided the race). Such a decision is raced again once;
    the new decision records ``reraced`` and is trusted from then on. Decisions without timings
    or spread (not raced) are trusted.
    """
    if value.get("reraced"):
        return True
    timings = value.get("timings") or {}
    median, spread = timings.get(value.get("backend")), value.get("spread_us")
    if median is None or spread is None or spread <= NOISY_SPREAD * median:
        return True
    return not any(us <= median + spread for name, us in timings.items() if name != value.get("backend"))


_unwritable: set[Path] = set()
_unwritable_lock = threading.Lock()


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` by a temporary file of its own in the same folder, then a rename:
    a reader sees the old file or the new one, never a part, and writers at once don't share a
    temporary file. The temporary file is never taken for an entry (not ``*.json``), even if a kill
    leaves it behind; Ctrl-C anywhere here removes it."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".part")
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise


class DecisionCache:
    """Entries keyed by a mapping of strings (op, backend, versions, device, dtype, bucket...)."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self._memo: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._rejected: dict[tuple, str] = {}

    @property
    def entries_dir(self) -> Path:
        return self.directory / f"v{SCHEMA}"

    @property
    def rejected(self) -> dict[str, str]:
        """Files this object skipped since it was made (path -> why), each warned about once."""
        with self._lock:
            return {str(k[0]): why for k, why in self._rejected.items()}

    def path_of(self, key: Mapping[str, str]) -> Path:
        digest = hashlib.sha256(_key_text(key).encode()).hexdigest()[:40]
        return self.entries_dir / f"{digest}.json"

    # -- reading ---------------------------------------------------------------------------------

    def get(self, key: Mapping[str, str]) -> dict[str, Any] | None:
        """The value stored under ``key``, or None (missing, or skipped with a CacheWarning)."""
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
            self._reject(path, "it holds another key (stale)")
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
            key, value = check_entry(data.get("key"), data.get("value"))
            return {"key": key, "value": value}
        except RecursionError:
            self._reject(path, "RecursionError: nested too deeply to be a cache entry")
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            self._reject(path, f"{type(exc).__name__}: {exc}")
        return None

    def _reject(self, path: Path, why: str) -> None:
        try:
            stat = path.stat()
            version = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            version = None
        with self._lock:
            first = (path, version, why) not in self._rejected
            self._rejected[(path, version, why)] = why
        if first:
            warnings.warn(f"ignoring cache file {path} ({why}); the decision will be made again and rewritten",
                          CacheWarning, stacklevel=4)

    def entries(self) -> Iterator[tuple[dict[str, str], dict[str, Any]]]:
        """Every valid entry, as (key, value); others are skipped with a warning."""
        if not self.entries_dir.is_dir():
            return
        for path in sorted(p for p in self.entries_dir.glob("*.json") if not p.name.startswith(".tmp-")):
            entry = self._read(path)
            if entry is not None:
                yield entry["key"], entry["value"]

    # -- writing ---------------------------------------------------------------------------------

    def put(self, key: Mapping[str, str], value: Mapping[str, Any]) -> Path | None:
        """Keep ``value`` under ``key`` in memory and, if the cache can be written, on disk.

        Returns the file written, or None when the cache could not be written: that is one
        CacheWarning per process and cache directory, never an error. A key or value that does
        not fit the schema is an EntryError (a bug of the caller).
        """
        key, value = check_entry(key, value)
        payload = json.dumps({"schema": SCHEMA, "key": key, "value": value}, sort_keys=True, indent=1)
        with self._lock:
            self._memo[_key_text(key)] = json.loads(payload)["value"]
        try:
            return self._write(key, payload)
        except OSError as exc:  # filelock's Timeout is an OSError too
            with _unwritable_lock:
                first = self.directory not in _unwritable
                _unwritable.add(self.directory)
            if first:
                warnings.warn(f"cannot write the dispatch cache at {self.directory} ({type(exc).__name__}: {exc}); "
                              f"decisions are kept in memory for this process only. Set {ENV_CACHE_DIR} to a "
                              "writable directory to keep them", CacheWarning, stacklevel=2)
            return None

    def store(self, key: Mapping[str, str], value: Mapping[str, Any]) -> Path:
        """Like :meth:`put`, but a cache that cannot be written raises OSError (for imports)."""
        key, value = check_entry(key, value)
        payload = json.dumps({"schema": SCHEMA, "key": key, "value": value}, sort_keys=True, indent=1)
        path = self._write(key, payload)
        with self._lock:
            self._memo[_key_text(key)] = json.loads(payload)["value"]
        return path

    def _write(self, key: dict[str, str], payload: str) -> Path:
        """Write atomically (temp file + rename, under a file lock)."""
        path = self.path_of(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT_S):
            write_atomically(path, payload)
        return path

    def clear(self) -> int:
        """Delete every entry; return how many files were removed.

        An entry that cannot be removed (a directory in its place, no permission) is reported
        with a CacheWarning and the rest are still removed.
        """
        removed = 0
        with self._lock:
            self._memo.clear()
        if not self.entries_dir.is_dir():
            return 0
        for path in sorted(self.entries_dir.iterdir()):
            if path.suffix not in (".json", ".lock", ".part"):
                continue
            try:
                if path.is_dir() and not path.is_symlink():
                    path.rmdir()  # an empty directory in an entry's place; a full one is reported
                else:
                    path.unlink(missing_ok=True)
                removed += path.suffix == ".json" and not path.name.startswith(".tmp-")
            except OSError as exc:
                warnings.warn(f"could not remove {path} ({type(exc).__name__}: {exc})", CacheWarning, stacklevel=2)
        return removed

    def forget_memo(self) -> None:
        """Drop what this process remembers, so the next read goes to disk."""
        with self._lock:
            self._memo.clear()

    # -- moving between machines -----------------------------------------------------------------

    def export(self, file: Path | str) -> int:
        """Write every valid entry to one JSON file; return how many (see :mod:`.fleet`)."""
        from .fleet import export_entries

        return export_entries(self, file)

    def import_(self, file: Path | str, machine: Any = None):
        """Read entries written by :meth:`export`; return an :class:`~.fleet.ImportReport`."""
        from .fleet import import_entries

        return import_entries(self, file, machine)


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
