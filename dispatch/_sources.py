"""Helpers for backend authors: a kernel source hash and a distribution's version, for cache keys."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


@functools.lru_cache(maxsize=None)
def source_hash(*modules: str) -> str:
    """A short hash of the source files of ``modules`` (dotted names), without importing them.

    Put it in ``BackendInfo.versions`` so that editing a kernel invalidates its cached tunings.
    """
    digest = hashlib.sha256()
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            digest.update(f"missing:{name}".encode())
            continue
        digest.update(Path(spec.origin).read_bytes())
    return digest.hexdigest()[:16]


def dist_version(name: str) -> str | None:
    """The installed version of distribution ``name``, or None when it is not installed."""
    try:
        return version(name)
    except PackageNotFoundError:
        return None
