"""Shared fixtures: every test gets its own cache dir and leaves settings and backends as it found them."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # subprocesses too: tiny CPU ops, timed on a 2-core machine

import pytest
import torch

import dispatch
from dispatch import _native, _plugins
from dispatch._dispatcher import DISPATCHER

_native.tensor_key()  # built (once per torch) before any test times a call or starts a subprocess

torch.set_num_threads(1)
if not torch.cuda.is_available():
    # Triton runs its kernels for real on the CPU under its interpreter, which must be on before
    # triton is imported (the registry reads it when the Triton backend loads).
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def isolated_dispatch(tmp_path, tmp_path_factory, monkeypatch):
    monkeypatch.setenv("DISPATCH_CACHE_DIR", str(tmp_path / "cache"))
    # no shipped decisions unless a test ships some (an empty folder of its own: tmp_path stays empty)
    monkeypatch.setenv("DISPATCH_TABLES_DIR", str(tmp_path_factory.mktemp("tables")))
    for var in ("DISPATCH_BACKEND", "DISPATCH_ALLOW", "DISPATCH_DENY", "DISPATCH_POLICY", "DISPATCH_AUTOTUNE",
                "DISPATCH_STRICT", "DISPATCH_DISTRIBUTED", "DISPATCH_DISTRIBUTED_TIMEOUT", "DISPATCH_SHARED_CACHE"):
        monkeypatch.delenv(var, raising=False)
    before = set(dispatch.backends())
    packages = set(_plugins.registry()._op_plugins)
    dispatch.reset()
    DISPATCHER.reset()
    yield
    for name in set(dispatch.backends()) - before:
        dispatch.unregister(name)
    for name in set(_plugins.registry()._op_plugins) - packages:  # op packages a test registered
        if name in _plugins.registry()._op_plugins:
            dispatch.unregister(name)
    dispatch.reset()
    DISPATCHER.reset()


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (GPU tests run on the device machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def tl_log(tmp_path, monkeypatch):
    """TileLang autotuner log records of one test (and no autotuner.log left in the repo)."""
    import logging

    pytest.importorskip("tilelang")
    from dispatch_tilelang import native_tune

    monkeypatch.chdir(tmp_path)  # TileLang's autotuner may write autotuner.log to the cwd
    records: list[logging.LogRecord] = []

    class Grab(logging.Handler):
        def emit(self, record):
            records.append(record)

    tl_logger = native_tune._tuner_logger()
    handler = Grab(logging.DEBUG)
    tl_logger.addHandler(handler)
    yield records
    tl_logger.removeHandler(handler)
