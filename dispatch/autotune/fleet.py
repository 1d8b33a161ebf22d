"""Moving cache entries between machines: export, import, and the checks an entry passes on the way in.

An imported entry is checked against the schema (:mod:`.entries`) and against this machine
(:class:`Machine`): its ``device`` must be a device here (the CPU always; a GPU model when CUDA is
available here, otherwise GPU entries are taken as they are, since no GPU here can tell), and its
backend versions must match the versions of those backends loaded here (entries of backends not
loaded here are kept). An entry that fails either check is skipped with a warning and reported;
a good local entry is never overwritten by a bad one.
"""

from __future__ import annotations

import json
import platform
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from attrs import field, frozen

from .cache import SCHEMA, CacheWarning
from .entries import EntryError, check_entry

if TYPE_CHECKING:
    from .cache import DecisionCache


def _frozen_versions(value: Mapping[str, Mapping[str, str]]) -> Mapping[str, Mapping[str, str]]:
    return MappingProxyType({name: MappingProxyType(dict(v)) for name, v in value.items()})


@frozen
class Machine:
    """What an imported entry is checked against: this machine's device names and backend versions.

    ``cpu`` is the CPU's device name (``"cpu:x86_64"``); ``gpus`` the GPU models here, or None
    where that is not known (no CUDA); ``versions`` maps a backend name to the version fields of
    its cache keys (``backend_version`` and ``v:<name>``).
    """

    cpu: str
    gpus: frozenset[str] | None = field(default=None, converter=lambda g: None if g is None else frozenset(g))
    versions: Mapping[str, Mapping[str, str]] = field(factory=dict, converter=_frozen_versions)

    @classmethod
    def here(cls) -> Machine:
        """This process's machine: its CPU, its CUDA devices (if any) and the loaded backends."""
        import torch

        from .. import _plugins

        gpus = None
        if torch.cuda.is_available():
            gpus = {torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())}
        versions = {name: {"backend_version": b.info.version,
                           **{f"v:{k}": str(v) for k, v in b.info.versions.items()}}
                    for name, b in _plugins.registry().backends.items()}
        return cls(f"cpu:{platform.machine() or 'unknown'}", gpus, versions)

    def why_foreign(self, key: Mapping[str, str]) -> str | None:
        """Why an entry under ``key`` does not belong on this machine, or None if it may."""
        device = key.get("device")
        if device is not None:
            if device.startswith("cpu:") and device != self.cpu:
                return f"tuned on {device}, this machine's CPU is {self.cpu}"
            if ":" not in device and self.gpus is not None and device not in self.gpus:
                return f"tuned on {device}, this machine has {', '.join(sorted(self.gpus)) or 'no GPU'}"
        if key.get("kind") == "tune" and key.get("backend") in self.versions:
            here = self.versions[key["backend"]]
            there = {k: v for k, v in key.items() if k == "backend_version" or k.startswith("v:")}
            if there != dict(here):
                diff = ", ".join(f"{k} {there.get(k, '-')} (here {here.get(k, '-')})"
                                 for k in sorted(set(there) | set(here)) if there.get(k) != here.get(k))
                return f"tuned with another version of {key['backend']}: {diff}"
        if key.get("kind") == "decision":
            for item in filter(None, key.get("candidates", "").split(",")):
                name, _, version = item.partition("=")
                if name in self.versions and self.versions[name]["backend_version"] != version:
                    return (f"decided with {name} {version}, this machine has {name} "
                            f"{self.versions[name]['backend_version']}")
        return None


@frozen
class ImportReport:
    """What an import did: how many entries it stored, and each rejected one with why."""

    file: str
    imported: int
    rejected: tuple[tuple[str, str], ...] = field(converter=tuple)

    def __str__(self) -> str:
        text = f"imported {self.imported}, rejected {len(self.rejected)}"
        if self.rejected:
            text += ": " + "; ".join(f"{which}: {why}" for which, why in self.rejected)
        return text


def export_entries(cache: DecisionCache, file: Path | str) -> int:
    """Write every valid entry of ``cache`` to ``file`` (one JSON file); return how many."""
    target = Path(file)
    if target.is_dir():
        raise ValueError(f"'file' must be a file to write, not a directory (got {str(target)!r}; "
                         f"try {str(target / 'dispatch-cache.json')!r})")
    entries = [{"key": k, "value": v} for k, v in cache.entries()]
    target.write_text(json.dumps({"schema": SCHEMA, "entries": entries}, sort_keys=True, indent=1))
    return len(entries)


def _load(file: Path | str) -> list[Any]:
    try:
        data = json.loads(Path(file).read_text())
    except RecursionError:
        raise ValueError("nested too deeply to be a cache export") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"not text ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("entries"), list):
        raise ValueError(f"not a dispatch cache export of schema {SCHEMA}")
    return data["entries"]


def import_entries(cache: DecisionCache, file: Path | str, machine: Machine | None = None) -> ImportReport:
    """Store the entries of an export ``file`` in ``cache`` that fit the schema and ``machine``
    (default: :meth:`Machine.here`). A file that is not an export is rejected whole; each rejected
    entry is one CacheWarning. Nothing in the file is executed. A cache that cannot be written
    raises OSError (entries stored before it stay)."""
    try:
        entries = _load(file)
    except (OSError, ValueError) as exc:
        why = f"{type(exc).__name__}: {exc}" if isinstance(exc, OSError) else str(exc)
        warnings.warn(f"rejected cache import {file}: {why}", CacheWarning, stacklevel=3)
        return ImportReport(str(file), 0, ((str(file), why),))
    machine = machine if machine is not None else Machine.here()
    imported, rejected = 0, []
    for i, entry in enumerate(entries):
        try:
            if not isinstance(entry, dict):
                raise EntryError(f"an entry must be {{'key': {{...}}, 'value': {{...}}}} (got {str(entry)[:60]})")
            key, value = check_entry(entry.get("key"), entry.get("value"))
            foreign = machine.why_foreign(key)
            if foreign is not None:
                raise EntryError(foreign)
        except (EntryError, RecursionError) as exc:
            why = str(exc) if isinstance(exc, EntryError) else "nested too deeply"
            warnings.warn(f"rejected entry {i} of {file}: {why}", CacheWarning, stacklevel=3)
            rejected.append((f"entry {i}", why))
            continue
        try:
            cache.store(key, value)
        except OSError as exc:
            raise OSError(f"cannot write the dispatch cache at {cache.directory} ({type(exc).__name__}: {exc}); "
                          f"{imported} entries of {file} were imported before it") from exc
        imported += 1
    return ImportReport(str(file), imported, tuple(rejected))
