"""The Triton backend through dispatch: certified against the reference, tuned by the protocol.

On the CPU the kernels run under Triton's interpreter (conftest turns it on), and dispatch's own
sweep tunes them; on CUDA Triton's autotuner does (tests/test_gpu_backends.py).
"""

from __future__ import annotations

import pytest
import torch

import dispatch
from dispatch.tolerance import mismatch

pytest.importorskip("triton")


@pytest.fixture(autouse=True)
def triton_backend():
    info = dispatch.backends().get("triton")
    if info is None or not info.available:
        pytest.skip(f"triton backend unavailable: {info.available.reason if info else 'not loaded'}")


def test_certified_against_the_reference():
    from dispatch_pytest.conformance import certify

    report = certify("triton")
    assert not report.failed, "\n".join(str(c) for c in report.failed)
    assert len(report.passed) > 100


def test_refuses_what_it_does_not_serve_with_reasons():
    x64 = torch.randn(4, 8, dtype=torch.float64)
    with pytest.raises(dispatch.BackendRefusedError, match="float64 not served"):
        dispatch.softmax(x64, backend="triton")
    with pytest.raises(dispatch.BackendRefusedError, match="last, unit-stride dim only"):
        dispatch.softmax(torch.randn(4, 8), 0, backend="triton")


def test_dispatch_sweep_tunes_it_on_the_cpu_and_caches_the_winner():
    from dispatch._select import Selector
    from dispatch.autotune import TuneSettings, default_cache, measurement_count

    x = torch.randn(64, 300)
    spec = dispatch.explain("softmax", x, -1, backend="triton").decision.spec
    backend = dispatch._plugins.registry().backends["triton"]
    selector = Selector(dispatch._plugins.registry(), default_cache(), dispatch.settings())
    quick = TuneSettings(warmup=1, rep=3)  # the interpreter is slow; the protocol's defaults are 25/50
    before = measurement_count()
    tune = selector.tune(backend, spec, settings=quick)
    space = backend.tune_space("softmax", spec)
    assert tune.source == "sweep" and tune.config in space.configs and tune.latency_us > 0
    assert len(tune.timings) + len(tune.failures) == len(space.configs) == measurement_count() - before
    assert selector.tune(backend, spec, settings=quick) == tune  # cached: measured nothing more
    assert measurement_count() - before == len(space.configs)
    dispatch.configure(autotune=True)
    decision = dispatch.explain("softmax", x, -1, backend="triton").decision
    assert decision.config == tune.config and decision.config_source == "tune cache"
    assert mismatch(dispatch.softmax(x, -1, backend="triton"), torch.softmax(x, -1)) is None


def test_long_rows_take_the_multi_chunk_path_and_are_correct():
    x = torch.randn(2, 70000)
    space = dispatch._plugins.registry().backends["triton"].tune_space(
        "softmax", dispatch.explain("softmax", x, -1, backend="triton").decision.spec)
    assert space.default["path"] != "onepass"
    for op in ("softmax", "log_softmax", "logsumexp"):
        assert mismatch(getattr(dispatch, op)(x, -1, backend="triton"), getattr(torch, op)(x, -1)) is None, op
