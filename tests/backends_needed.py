"""Skipping a test whose backend is not loaded or not available here, with the reason."""

from __future__ import annotations

import importlib.util

import pytest
import torch

import dispatch

#: where the kernel backends run: the GPU where there is one, else the CPU (the Triton interpreter,
#: which conftest turns on, and TileLang's C target)
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")

#: pytest params for the kernel backends, each skipped where its package is not installed
KERNEL_BACKENDS = [pytest.param(name, marks=pytest.mark.skipif(importlib.util.find_spec(module) is None,
                                                               reason=f"{module} is not installed"))
                   for name, module in (("triton", "dispatch_triton"), ("tilelang", "dispatch_tilelang"))]


def require_backend(name: str):
    """``name``'s BackendInfo; the calling test (or fixture) is skipped, saying why, unless it is
    loaded and available."""
    info = dispatch.backends().get(name)
    if info is None or not info.available:
        pytest.skip(f"{name} backend unavailable: {info.available.reason if info else 'not loaded'}")
    return info
