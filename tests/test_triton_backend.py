"""The Triton backend through dispatch: certified against the reference, tuned by the protocol.

On the CPU the kernels run under Triton's interpreter (conftest turns it on), and dispatch's own
sweep tunes them; on CUDA Triton's autotuner does (tests/test_gpu_backends.py).
"""

from __future__ import annotations

import pytest
import torch

import dispatch
from backends_needed import require_backend
from dispatch.tolerance import mismatch

pytest.importorskip("triton")


# Tests that pick their own device; every other test here runs CPU tensors, which Triton serves only
# under its interpreter (on a GPU machine, tests/test_gpu_backends.py covers the backend on CUDA)
DEVICE_AGNOSTIC = {"test_certified_against_the_reference"}  # the function's name (every op)


@pytest.fixture(autouse=True)
def triton_backend(request):
    info = require_backend("triton")
    if request.function.__name__ not in DEVICE_AGNOSTIC and info.versions.get("interpreter") != "1":
        pytest.skip("runs CPU tensors, which need the Triton interpreter (off on a GPU machine)")


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp", "rms_norm", "layer_norm"])
def test_certified_against_the_reference(op):
    # op by op: on a GPU the kit tries every config of the tune space (many compiles; the whole grid
    # took over 290 s in one process), and benchmarks/run_tests_sharded.py deals these tests over
    # its processes
    from dispatch_pytest.cases import default_cases
    from dispatch_pytest.conformance import certify

    report = certify("triton", default_cases((op,)))
    assert not report.failed, "\n".join(str(c) for c in report.failed)
    assert len(report.passed) >= len(report.results) // 2, report.summary()


def test_refuses_what_it_does_not_serve_with_reasons():
    x64 = torch.randn(4, 8, dtype=torch.float64)
    with pytest.raises(dispatch.BackendRefusedError, match="float64 not served"):
        dispatch.softmax(x64, backend="triton")
    x = torch.randn(6, 6, 5, 6, 8)[::2, ::3, :, ::2, ::2]  # the dims kept don't merge into three groups
    with pytest.raises(dispatch.BackendRefusedError, match="don't collapse"):
        dispatch.softmax(x, 2, backend="triton")


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


# ---------------------------------------------------------------------------------------------
# the resolved kernel: what depends on the call spec is computed once, when it is built; a call
# allocates its output and launches


TORCH_OPS = {"softmax": torch.softmax, "log_softmax": torch.log_softmax, "logsumexp": torch.logsumexp}


def resolved(op, x, out_dtype=None, keepdim=False, config=None):
    """The Triton backend's kernel for ``op`` over the last dim of tensors like ``x``, as dispatch builds it."""
    from dispatch.autotune import Config

    backend = dispatch._plugins.registry().backends["triton"]
    from dispatch.backend import spec_of

    spec = spec_of(op, x, -1, keepdim) if op == "logsumexp" else spec_of(op, x, -1, out_dtype)
    assert backend.check(op, spec).ok
    return backend.kernel(op, spec, Config.of(config or {}))


def expected(op, x, out_dtype=None, keepdim=False):
    if op == "logsumexp":
        return torch.logsumexp(x if out_dtype is None else x.to(out_dtype), -1, keepdim=keepdim)
    return TORCH_OPS[op](x, -1, dtype=out_dtype)


def randn(*shape, dtype=torch.float32, seed=0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 3).to(dtype)


# small-block configs that put the split paths on short rows (the interpreter is slow)
SPLIT = {"path": "split", "BLOCK_N": 512, "ROWS": 1, "SPLIT": 1, "num_warps": 4, "num_stages": 1}
SPLIT_ONLINE = {"path": "split_online", "BLOCK_N": 256, "ROWS": 1, "SPLIT": 3, "num_warps": 2, "num_stages": 2}
SPLIT_PIPE = dict(SPLIT, path="split_pipe")  # softmax/log_softmax only
PATH_CASES = [pytest.param(op, config, id=f"{name}-{op}")
              for name, config in (("default", None), ("split", SPLIT), ("split_pipe", SPLIT_PIPE),
                                   ("split_online", SPLIT_ONLINE))
              for op in TORCH_OPS if not (config is SPLIT_PIPE and op == "logsumexp")]


@pytest.mark.parametrize("op", list(TORCH_OPS))
def test_fast_path_contiguous(op):
    x = randn(5, 40)
    assert mismatch(resolved(op, x)(x), expected(op, x)) is None
    assert mismatch(getattr(dispatch, op)(x, -1, backend="triton"), expected(op, x)) is None


@pytest.mark.parametrize("op,config", PATH_CASES)
def test_fast_path_row_stride_wider_than_the_row(op, config):
    n = 40 if config is None else 1100  # the split configs cut a row of 1100 over 3 programs
    wide = randn(3, n + 37, seed=1)
    x = wide[:, 5:5 + n]
    assert x.stride() == (n + 37, 1) and not x.is_contiguous()
    assert mismatch(resolved(op, x, config=config)(x), expected(op, x)) is None
    if config is None:
        assert mismatch(getattr(dispatch, op)(x, -1, backend="triton"), expected(op, x)) is None


@pytest.mark.parametrize("op", list(TORCH_OPS))
def test_fast_path_3d_input(op):
    x = randn(2, 3, 40, seed=2)
    y = resolved(op, x)(x)
    assert y.shape == expected(op, x).shape and y.is_contiguous()
    assert mismatch(y, expected(op, x)) is None
    assert mismatch(getattr(dispatch, op)(x, -1, backend="triton"), expected(op, x)) is None
    # leading dims that collapse to rows at a row stride wider than the row
    xs = randn(2, 3, 64, seed=3)[..., :40]
    assert mismatch(getattr(dispatch, op)(xs, -1, backend="triton"), expected(op, xs)) is None
    assert mismatch(resolved(op, xs, config=SPLIT_ONLINE)(xs), expected(op, xs)) is None


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_fast_path_widening_dtype_cast(op):
    x = randn(4, 40, dtype=torch.bfloat16, seed=4)
    y = getattr(dispatch, op)(x, -1, dtype=torch.float32, backend="triton")
    assert y.dtype == torch.float32 and mismatch(y, expected(op, x, torch.float32)) is None
    xl = randn(3, 1100, dtype=torch.bfloat16, seed=5)  # and on the split path
    y = resolved(op, xl, torch.float32, config=SPLIT)(xl)
    assert y.dtype == torch.float32 and mismatch(y, expected(op, xl, torch.float32)) is None


def test_fast_path_logsumexp_keepdim():
    x = randn(2, 3, 40, seed=6)
    y = dispatch.logsumexp(x, -1, keepdim=True, backend="triton")
    assert y.shape == (2, 3, 1) and mismatch(y, torch.logsumexp(x, -1, keepdim=True)) is None
    y = resolved("logsumexp", x, keepdim=True, config=SPLIT_ONLINE)(x)
    assert y.shape == (2, 3, 1) and mismatch(y, torch.logsumexp(x, -1, keepdim=True)) is None
    v = randn(40, seed=7)  # one row: a 0-d result, or (1,) with keepdim
    assert mismatch(dispatch.logsumexp(v, -1, backend="triton"), torch.logsumexp(v, -1)) is None
    assert mismatch(dispatch.logsumexp(v, -1, keepdim=True, backend="triton"),
                    torch.logsumexp(v, -1, keepdim=True)) is None


@pytest.mark.parametrize("op,config", PATH_CASES)
def test_same_kernel_two_tensors_two_independent_outputs(op, config):
    n = 40 if config is None else 1100
    x1, x2 = randn(3, n, seed=8), randn(3, n, seed=9)
    kernel = resolved(op, x1, config=config)
    y1 = kernel(x1)
    y2 = kernel(x2)
    assert y1.data_ptr() != y2.data_ptr()
    assert mismatch(y1, expected(op, x1)) is None and mismatch(y2, expected(op, x2)) is None
    if config is None:  # and through dispatch: the second call's output does not overwrite the first's
        d1 = getattr(dispatch, op)(x1, -1, backend="triton")
        d2 = getattr(dispatch, op)(x2, -1, backend="triton")
        assert d1.data_ptr() != d2.data_ptr()
        assert mismatch(d1, expected(op, x1)) is None and mismatch(d2, expected(op, x2)) is None


def test_fast_path_does_not_redo_per_spec_work(monkeypatch):
    from dispatch_triton import launch

    x = randn(4, 40, seed=10)
    kernels = {op: resolved(op, x) for op in TORCH_OPS}
    xl = randn(3, 1100, seed=11)
    kernels["split"] = resolved("softmax", xl, config=SPLIT)

    def refuse(*args, **kwargs):
        raise AssertionError("per-spec work on the per-call path")

    for name in ("_check", "_check_dtypes", "_validate", "_grid_size", "_capacity", "placeholder", "_sync_buffer"):
        monkeypatch.setattr(launch, name, refuse)
    for op in TORCH_OPS:
        assert mismatch(kernels[op](x), expected(op, x)) is None
    assert mismatch(kernels["split"](xl), expected("softmax", xl)) is None
