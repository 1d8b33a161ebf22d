"""Skipping a test whose backend is not loaded or not available here, with the reason."""

from __future__ import annotations

import pytest

import dispatch


def require_backend(name: str):
    """``name``'s BackendInfo; the calling test (or fixture) is skipped, saying why, unless it is
    loaded and available."""
    info = dispatch.backends().get(name)
    if info is None or not info.available:
        pytest.skip(f"{name} backend unavailable: {info.available.reason if info else 'not loaded'}")
    return info
