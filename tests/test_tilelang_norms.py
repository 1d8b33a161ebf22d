"""rms_norm and layer_norm on the TileLang backend: C-target kernels vs torch, refusals, CUDA config spaces."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("tilelang")

import dispatch  # noqa: E402
from dispatch.backend import spec_of  # noqa: E402

try:
    from dispatch_tilelang import norms as N  # noqa: E402
    from dispatch_tilelang.norm_kernels import cuda_check  # noqa: E402
except ImportError:  # pragma: no cover - backends/ not installed
    pytest.skip("dispatch_tilelang is not importable", allow_module_level=True)

F32, BF16 = torch.float32, torch.bfloat16
TOL = {F32: dict(rtol=1e-5, atol=1e-5), BF16: dict(rtol=1.6e-2, atol=1e-2)}


def _t(shape, dtype, seed, scale=1.0, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale + shift).to(dtype)


def _args(op, x, ns, weight, bias):
    w = _t(ns, x.dtype, 1, 0.5, 1.0) if weight else None
    b = _t(ns, x.dtype, 2, 0.5) if bias else None
    return (x, list(ns), w) if op == "rms_norm" else (x, list(ns), w, b)


def _check(op, args, dtype):
    y = getattr(dispatch, op)(*args, backend="tilelang")
    ref = getattr(F, op)(*[a.double() if isinstance(a, torch.Tensor) else a for a in args])
    assert y.dtype == args[0].dtype and y.shape == args[0].shape
    torch.testing.assert_close(y.double(), ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("affine", [(False, False), (True, True)], ids=["plain", "affine"])
def test_c_target_matches_torch(op, dtype, affine):
    x = _t((2, 3, 4, 6), dtype, 0, 2.0, 3.0)
    _check(op, _args(op, x, (4, 6), *affine), dtype)


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_c_target_rows_in_chunks(op):
    x = _t((3, 9000), F32, 4, 1.0, 10.0)  # > one tile: walked in 2048-element chunks, read twice
    spec = spec_of(op, x, (9000,))
    assert N.default_config(3, 9000, "c")["tile_n"] > 0, spec
    _check(op, _args(op, x, (9000,), True, op == "layer_norm"), F32)


GTOL = {F32: dict(rtol=1e-4, atol=1e-4), BF16: dict(rtol=5e-2, atol=5e-2)}


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("affine", [(False, False), (True, True), (False, True)], ids=["plain", "affine", "bias"])
def test_backward_kernels_match_torch(op, dtype, affine):
    from dispatch_tilelang import dispatch_backward

    x = _t((9, 3, 8), dtype, 5, 2.0, 1.0)  # 9 rows: the last program holds fewer than block_m
    args = _args(op, x, (3, 8), *affine)
    assert dispatch_backward(op, spec_of(op, *args)) is not None  # a TileLang kernel, not the reference
    proj = _t(x.shape, torch.float64, 6)
    ours = [a.detach().clone().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
    (getattr(dispatch, op)(*ours, backend="tilelang").double() * proj).sum().backward()
    theirs = [a.detach().double().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
    (getattr(F, op)(*theirs) * proj).sum().backward()
    for a, b in zip(ours, theirs):
        if isinstance(a, torch.Tensor):
            scale = b.grad.abs().max().clamp_min(1)
            torch.testing.assert_close(a.grad.double() / scale, b.grad / scale, **GTOL[dtype])


def test_long_rows_take_the_reference_backward():
    from dispatch_tilelang import dispatch_backward

    x = _t((2, 9000), F32, 7).requires_grad_()
    assert dispatch_backward("rms_norm", spec_of("rms_norm", x, (9000,))) is None
    dispatch.rms_norm(x, [9000], backend="tilelang").sum().backward()
    x2 = x.detach().clone().requires_grad_()
    F.rms_norm(x2, [9000]).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)


@pytest.mark.parametrize("why,call", [
    ("float64", lambda: spec_of("rms_norm", torch.ones(2, 8, dtype=torch.float64), (8,))),
    ("input's dtype", lambda: spec_of("rms_norm", torch.ones(2, 8), (8,), torch.ones(8, dtype=BF16))),
    ("contiguous", lambda: spec_of("layer_norm", torch.ones(6, 8)[::2], (8,))),
], ids=["fp64", "mixed-dtype", "strided"])
def test_refusals_say_why(why, call):
    from dispatch_tilelang import dispatch_check

    spec = call()
    verdict = dispatch_check(spec.op, spec)
    assert not verdict.ok and why in verdict.reason, verdict


def test_cuda_refuses_rows_beyond_the_registers():
    spec = spec_of("rms_norm", torch.ones(2, 65536), (65536,))
    verdict = N.check(spec, "cuda")
    assert not verdict.ok and "65536" in verdict.reason


@pytest.mark.parametrize("n", [1, 40, 1024, 4096, 16384, 32768])
def test_cuda_config_space_fits_the_registers(n):
    space = N.config_space(64, n, "cuda")
    assert space and N.default_config(64, n, "cuda") in space
    for cfg in space:
        assert cuda_check(n, cfg["block_m"], cfg["threads"]) is None and cfg["tile_n"] == 0


def test_tune_space_declares_tunables_and_build_keys():
    from dispatch_tilelang import dispatch_tune_space

    space = dispatch_tune_space("layer_norm", spec_of("layer_norm", torch.ones(8, 64), (64,)))
    assert space.tunables == ("block_m",) and space.build_keys == ("tile_n",)
    assert space.default.as_dict() in [c.as_dict() for c in space.configs]


@pytest.mark.parametrize("which", ["forward", "backward"])
def test_cuda_norm_programs_close_over_plain_values_only(which):
    """TileLang's autotuner keys its cache on the program's closure and refuses (AssertionError)
    any cell that is not an int/float/str/bool/None: a module or dict in a cell made every CUDA
    norm tune fail on the device. The programs are built on the CPU; nothing is compiled here."""
    from dispatch_tilelang import norm_backward, norm_kernels

    if which == "forward":
        progs = [norm_kernels.cuda_program(op, 4096, "bfloat16", w, b, 1e-6)
                 for op in ("rms_norm", "layer_norm") for w in (False, True) for b in (False, True)]
    else:
        progs = [norm_backward.cuda_program(op, 4096, "bfloat16", w, 1e-6)
                 for op in ("rms_norm", "layer_norm") for w in (False, True)]
    for prog in progs:
        cells = [c.cell_contents for c in (prog.func.__closure__ or ())]
        bad = [v for v in cells if not isinstance(v, (int, float, str, bool, type(None)))]
        assert not bad, f"{prog.func.__qualname__} closes over {bad}"


def _misaligned(shape, dtype=BF16):
    base = _t(int(torch.tensor(shape).prod()) + 8, dtype, 11)
    view = base[1:1 + int(torch.tensor(shape).prod())].view(shape)  # 2 bytes past an aligned start
    assert view.data_ptr() % 16
    return view


def test_cuda_forward_hands_its_kernel_aligned_tensors_and_leaves_the_users_alone(monkeypatch):
    # the CUDA programs load 16-byte vectors from each tensor's start: a view that starts
    # mid-vector must reach them as an aligned copy (handed over as is, it faults on the GPU)
    seen = []

    def fake_build(*parts):
        def compiled(x, w, b):
            seen.append([t.data_ptr() % 16 for t in (x, w, b)])
            return torch.zeros_like(x)
        return compiled

    monkeypatch.setattr(N, "build", fake_build)
    x, w, b = _misaligned((4, 64)), _misaligned((64,)), _misaligned((64,))
    before = [t.clone() for t in (x, w, b)]
    run = N.kernel(spec_of("layer_norm", x, (64,), w, b), None, "cuda")
    run(x, w, b)
    assert seen == [[0, 0, 0]]
    assert all(torch.equal(t, u) for t, u in zip((x, w, b), before))


def test_cuda_backward_hands_its_kernel_aligned_tensors(monkeypatch):
    from dispatch_tilelang import norm_backward

    seen = []

    def fake_program(*args):
        def factory(**config):
            def compiled(x, w, dy, dx, pw, pb):
                seen.append([t.data_ptr() % 16 for t in (x, w, dy, dx)])
                pw.zero_(), pb.zero_()
            return compiled
        return factory

    monkeypatch.setattr(norm_backward, "cuda_program", fake_program)
    monkeypatch.setattr(norm_backward, "_BUILT", {})
    backward = norm_backward.make_backward("rms_norm", 4, 64, BF16, True, False, 1e-6, "cuda")
    x, w, dy = _misaligned((4, 64)), _misaligned((64,)), _misaligned((4, 64))
    before = [t.clone() for t in (x, w, dy)]
    backward(dy, x, w, None)
    assert seen == [[0, 0, 0, 0]]
    assert all(torch.equal(t, u) for t, u in zip((x, w, dy), before))
