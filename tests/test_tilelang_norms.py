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


def _massive_first(shape, dtype, device="cpu", value=3e4):
    # rows whose first element is far from the rest (a "massive activation"): a variance taken as
    # sum d^2 / N - (sum d / N)^2 about that element, or summed in fp32 one element after another
    # from it, loses the rest of the row
    x = _t(shape, F32, 21).to(device)
    x[..., 0] = value
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("n", [4096, 9000], ids=["one-tile", "chunks"])
def test_c_target_layer_norm_of_rows_with_a_massive_first_element(n, dtype):
    x = _massive_first((3, n), dtype)
    _check("layer_norm", _args("layer_norm", x, (n,), True, True), dtype)


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("shape,width", [((5, 24), 40), ((2, 3, 24), 40), ((4, 9000), 9011)],
                         ids=["rows", "leading-dims", "chunked"])
def test_c_target_reads_strided_rows_in_place(op, dtype, shape, width):
    # rows of a wider buffer (x[..., :N]): read through their stride, not copied; y is dense
    wide = _t((*shape[:-1], width), dtype, 8, 2.0, 3.0)
    x = wide[..., : shape[-1]]
    before = wide.clone()
    spec = spec_of(op, x, (shape[-1],))
    assert N.check(spec, "c").ok and N.row_stride(spec) == width
    _check(op, _args(op, x, (shape[-1],), True, True), dtype)
    assert torch.equal(wide, before)


def test_a_single_row_with_any_leading_stride_is_served_as_dense():
    x = _t((1, 3, 16), F32, 9)[:, 1:2]  # one row; its leading strides are 48 and 16
    spec = spec_of("rms_norm", x, (16,))
    assert N.row_stride(spec) == 0
    _check("rms_norm", _args("rms_norm", x, (16,), True, False), F32)


GTOL = {F32: dict(rtol=1e-4, atol=1e-4), BF16: dict(rtol=5e-2, atol=5e-2)}


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("affine", [(False, False), (True, True), (False, True), (True, False)],
                         ids=["plain", "affine", "bias", "weight"])
@pytest.mark.parametrize("shape,normalized", [((9, 3, 8), (3, 8)), ((9, 24), (24,)), ((3, 8), (3, 8))],
                         ids=["rows-of-two-dims", "two-dim-input", "two-dim-input-one-row"])
def test_backward_kernels_match_torch(op, dtype, affine, shape, normalized):
    from dispatch_tilelang import dispatch_backward

    x = _t(shape, dtype, 5, 2.0, 1.0)  # 9 rows: the last program holds fewer than block_m
    args = _args(op, x, normalized, *affine)
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


def _half_read_as_float32():
    # a bfloat16 input whose float32 result is read in the kernel under autocast (OpDecl.autocast_in_kernel)
    from dispatch.norms import LAYER_NORM

    return LAYER_NORM.spec(LAYER_NORM.bind(torch.ones(2, 8, dtype=BF16), [8]), out_dtype=F32)


@pytest.mark.parametrize("why,call", [
    ("float64", lambda: spec_of("rms_norm", torch.ones(2, 8, dtype=torch.float64), (8,))),
    ("input's dtype", lambda: spec_of("rms_norm", torch.ones(2, 8), (8,), torch.ones(8, dtype=BF16))),
    ("must be dense", lambda: spec_of("layer_norm", torch.ones(6, 8)[:, ::2], (4,))),
    ("don't collapse", lambda: spec_of("rms_norm", torch.ones(4, 6, 8)[::2, :3], (8,))),
    ("1048576", lambda: spec_of("rms_norm", torch.empty(1, (1 << 20) + 1), ((1 << 20) + 1,))),
    ("float32 result", lambda: _half_read_as_float32()),
], ids=["fp64", "mixed-dtype", "gapped-row", "rows-without-one-stride", "too-long", "autocast-read"])
def test_refusals_say_why(why, call):
    from dispatch_tilelang import dispatch_check

    spec = call()
    verdict = dispatch_check(spec.op, spec)
    assert not verdict.ok and why in verdict.reason, verdict


@pytest.mark.parametrize("m", [1, 3, 64])
@pytest.mark.parametrize("n", [1, 8, 16, 40, 1024, 4096, 16384, 32768])
def test_cuda_config_space_fits_the_registers(n, m):
    # a few short rows too (1 x 16: every block of 128 threads holds more rows than 4x the call's)
    space = N.config_space(m, n, "cuda")
    assert space and N.default_config(m, n, "cuda") in space
    assert N.check(spec_of("rms_norm", torch.ones(m, n, device="meta"), (n,)), "cuda").ok
    for cfg in space:
        if cfg.get("smem"):  # the chunk-in-shared-memory family (tests/test_tilelang_smem_norms.py)
            assert n >= N.SMEM_MIN_N and N.smem_refusal(n, "float32", 0, cfg) is None
        else:
            assert cuda_check(n, cfg["block_m"], cfg["threads"]) is None and cfg["tile_n"] == 0


@pytest.mark.parametrize("n", [32769, 50257, 262144, 1 << 20])
def test_cuda_rows_past_the_registers_are_walked_in_chunks_by_a_cta_each(n):
    from dispatch_tilelang.norm_kernels import chunked_check

    assert N.check(spec_of("rms_norm", torch.ones(2, n, device="meta"), (n,)), "cuda").ok
    space = N.config_space(2, n, "cuda")
    assert space and N.default_config(2, n, "cuda") == space[0]
    for cfg in space:
        assert cfg["block_m"] == 1 and cfg["tile_n"] > 0
        assert (N.smem_refusal(n, "float32", 0, cfg) if cfg.get("smem") else
                chunked_check(cfg["tile_n"], 1, cfg["threads"])) is None
    assert chunked_check(8192, 2, 512) and chunked_check(8192, 1, 96) and chunked_check(1000, 1, 512)


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
        progs = [norm_kernels.cuda_program(op, 4096, "bfloat16", w, b, 1e-6, None, stride)
                 for op in ("rms_norm", "layer_norm") for w in (False, True) for b in (False, True)
                 for stride in (0, 4160)]
        progs += [norm_kernels.cuda_chunked_program(op, 65536, "bfloat16", w, w, 1e-6, 8192, None, stride)
                  for op in ("rms_norm", "layer_norm") for w in (False, True) for stride in (0, 65600)]
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


# -- CUDA: the kernels on the device --------------------------------------------------------------

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("dtype,shape,width", [
    (BF16, (4, 4096), 4096), (BF16, (3, 4000), 4160), (F32, (2, 3, 1000), 1032),  # rows in registers
    (BF16, (3, 50257), 50257), (F32, (2, 262144), 262144), (BF16, (3, 40000), 40064),  # rows in chunks
], ids=["dense", "strided", "leading-dims-strided", "chunked-odd", "chunked-long", "chunked-strided"])
def test_cuda_kernels_match_torch_forward_and_backward(op, dtype, shape, width):
    # rows far from zero (mean 3, std 2) of a buffer that may be wider than N: read in place, the
    # buffer untouched; the backward is TileLang's where rows fit a CTA, else the reference's
    n = shape[-1]
    g = torch.Generator(device="cuda").manual_seed(0)
    wide = (torch.randn((*shape[:-1], width), device="cuda", generator=g) * 2 + 3).to(dtype)
    x = wide[..., :n]
    w = (torch.randn(n, device="cuda", generator=g) * 0.5 + 1).to(dtype)
    b = (torch.randn(n, device="cuda", generator=g) * 0.5).to(dtype)
    before = wide.clone()
    args = (x, [n], w) if op == "rms_norm" else (x, [n], w, b)
    assert dispatch.explain(op, *args, backend="tilelang").decision.backend == "tilelang"
    leaves = [a.detach().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
    y = getattr(dispatch, op)(*leaves, backend="tilelang")
    ref_leaves = [a.detach().double().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
    ref = getattr(F, op)(*ref_leaves)
    assert y.dtype == dtype and y.shape == x.shape and y.is_contiguous()
    torch.testing.assert_close(y.double(), ref, **TOL[dtype])
    gy = torch.randn(x.shape, device="cuda", generator=g).to(dtype)
    got = torch.autograd.grad(y, [t for t in leaves if isinstance(t, torch.Tensor)], gy)
    want = torch.autograd.grad(ref, [t for t in ref_leaves if isinstance(t, torch.Tensor)], gy.double())
    for a, e in zip(got, want):
        scale = e.abs().max().clamp_min(1)
        torch.testing.assert_close(a.double() / scale, e / scale, **GTOL[dtype])
    assert torch.equal(wide, before)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("n", [4096, 40000, 262144], ids=["registers", "chunks", "long-chunks"])
def test_cuda_layer_norm_of_rows_with_a_massive_first_element(n, dtype):
    x = _massive_first((3, n), dtype, "cuda")
    w, b = _t((n,), dtype, 1, 0.5, 1.0).cuda(), _t((n,), dtype, 2, 0.5).cuda()
    y = dispatch.layer_norm(x, [n], w, b, backend="tilelang")
    torch.testing.assert_close(y.double(), F.layer_norm(x.double(), [n], w.double(), b.double()), **TOL[dtype])


def test_explain_says_which_backward_a_training_call_takes():
    def line(x, n, **kw):
        out = [s for s in str(dispatch.explain("rms_norm", x, [n], **kw)).splitlines() if "backward:" in s]
        return out[0] if out else None

    short, long = _t((2, 64), F32, 12).requires_grad_(), _t((2, 9000), F32, 13).requires_grad_()
    assert "tilelang's own backward kernel" in line(short, 64, backend="tilelang")
    assert "reference backward" in line(long, 9000, backend="tilelang")  # rows past the C target's backward
    assert "torch's" in line(short, 64, backend="torch")
    assert line(short.detach(), 64, backend="tilelang") is None  # inference: no backward to speak of


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("shape,width", [((4, 1000), 1032), ((3, 40000), 40064)], ids=["strided", "chunked-strided"])
def test_cuda_tuning_serves_strided_and_chunked_rows(shape, width):
    # TileLang's own autotuner (seeded, tunables out of specialization) over these families, on
    # strided rows: a tuned config and a correct result
    dispatch.configure(autotune=True)
    n = shape[-1]
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn((*shape[:-1], width), device="cuda", generator=g).to(BF16)[..., :n]
    w, b = (torch.randn(n, device="cuda", generator=g).to(BF16) for _ in range(2))
    y = dispatch.layer_norm(x, [n], w, b, backend="tilelang")
    torch.testing.assert_close(y.double(), F.layer_norm(x.double(), [n], w.double(), b.double()), **TOL[BF16])
    decision = dispatch.explain("layer_norm", x, [n], w, b, backend="tilelang").decision
    assert decision.backend == "tilelang" and decision.tune is not None and decision.tune.latency_us > 0
    # the race picks among the family's chunk widths: whole rows up to CUDA_MAX_N, chunks past it
    assert decision.config.as_dict()["tile_n"] in ((0,) if n <= N.CUDA_MAX_N else N.CUDA_TILES)
