"""rms_norm and layer_norm on the Triton backend (the interpreter on the CPU), forward and backward vs torch.

Small shapes: every path of the forward (rows in registers, several rows per tile, persistent
programs walking several tiles, chunked, split over programs) and of the backward (rows in
registers, several per tile; long rows over row groups and chunks), with and without
weight/bias, multi-dim normalized_shape, strided rows, N = 1, bf16 and fp32; the refusals;
deterministic dweight; the backward plan's overrides; and the autotuner's cache shared by calls
with and without weight/bias.
"""

from __future__ import annotations

import itertools
import os

import pytest
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

pytest.importorskip("triton")

import dispatch  # noqa: E402
from dispatch.backend import spec_of  # noqa: E402
from dispatch.norms import LAYER_NORM, RMS_NORM  # noqa: E402

try:
    from dispatch_triton import norm_backward as NB  # noqa: E402
    from dispatch_triton import norm_backward_plan as NP  # noqa: E402
    from dispatch_triton import norms as N  # noqa: E402
except ImportError:  # pragma: no cover - backends/ not installed
    pytest.skip("dispatch_triton is not importable", allow_module_level=True)

DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")
F32, BF16 = torch.float32, torch.bfloat16
TOL = {F32: dict(rtol=1e-5, atol=1e-5), BF16: dict(rtol=1.6e-2, atol=1e-2)}
GTOL = {F32: dict(rtol=1e-4, atol=1e-4), BF16: dict(rtol=5e-2, atol=5e-2)}
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
DECLS = {"rms_norm": RMS_NORM, "layer_norm": LAYER_NORM}


def _t(shape, dtype, seed, scale=1.0, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale + shift).to(dtype).to(DEV)


def _args(op, x, ns, weight, bias):
    w = _t(ns, x.dtype, 1, 0.5, 1.0) if weight else None
    b = _t(ns, x.dtype, 2, 0.5) if bias else None
    return (x, list(ns), w) if op == "rms_norm" else (x, list(ns), w, b)


def _check_fwd_bwd(op, args, dtype):
    y = getattr(dispatch, op)(*args, backend="triton")
    ref = getattr(F, op)(*[a.double() if isinstance(a, torch.Tensor) else a for a in args])
    assert y.dtype == args[0].dtype and y.shape == args[0].shape
    torch.testing.assert_close(y.double(), ref, **TOL[dtype])
    proj = _t(args[0].shape, torch.float64, 7)
    ours = [a.detach().clone().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
    (getattr(dispatch, op)(*ours, backend="triton").double() * proj).sum().backward()
    theirs = [a.detach().double().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
    (getattr(F, op)(*theirs) * proj).sum().backward()
    for a, b in zip(ours, theirs):
        if isinstance(a, torch.Tensor):
            assert a.grad is not None and a.grad.dtype == a.dtype
            scale = b.grad.abs().max().clamp_min(1)
            torch.testing.assert_close(a.grad.double() / scale, b.grad / scale, **GTOL[dtype])


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("affine", [(False, False), (True, False), (True, True)], ids=["plain", "w", "wb"])
def test_short_rows_several_per_program(op, dtype, affine):
    x = _t((5, 40), dtype, 0, 2.0, 1.0)
    _check_fwd_bwd(op, _args(op, x, (40,), *affine), dtype)


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("n", [1000, 4096, 8192, 16384])
def test_each_buckets_default_config(op, dtype, n):
    # what a call gets with tuning off, bucket by bucket: the defaults differ by op and dtype (tiles
    # of rows, persistent grids, fp32 rms_norm rows walked in chunks, layer_norm's ONE_SUM); row 0
    # near zero, row 1 four spreads away from it (layer_norm's statistics taken again about the mean)
    x = _t((2, n), dtype, 9)
    x[1] += 4
    args = _args(op, x, (n,), True, True)
    decision = dispatch.explain(op, *args, backend="triton").decision
    assert decision.config_source == "default config"
    assert decision.config.as_dict() == N.default_config(2, n, dtype, DEV, op)  # the per-op default runs
    _check_fwd_bwd(op, args, dtype)


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_multi_dim_normalized_shape_and_leading_dims(op):
    x = _t((2, 3, 4, 6), F32, 3, 1.5, -2.0)
    _check_fwd_bwd(op, _args(op, x, (4, 6), True, True), F32)


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_strided_rows(op):
    base = _t((6, 50), BF16, 4)
    x = base[::2, :32]  # rows 100 apart, 32 of 50 columns
    spec = spec_of(op, x, (32,))
    assert dispatch.explain(op, x, [32], backend="triton").decision.backend == "triton", spec
    _check_fwd_bwd(op, _args(op, x, (32,), True, True), BF16)


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_long_rows_chunked(op, dtype):
    # N = 17000 > the one-pass limit: rows walked in chunks, the backward too
    x = _t((2, 17000), dtype, 5, 1.0, 3.0)
    _check_fwd_bwd(op, _args(op, x, (17000,), True, op == "layer_norm"), dtype)


def _row_stats(op, x, eps=1e-5):
    """What the forward saves for the backward of rows of ``x``: rstd (fp32), then layer_norm's mean."""
    xd = x.double()
    if op == "rms_norm":
        return (xd.pow(2).mean(-1) + eps).rsqrt().float()
    mean = xd.mean(-1)
    return torch.cat([(xd.var(-1, unbiased=False) + eps).rsqrt(), mean]).float()


def _backward_vs_torch(op, m, n, dtype, split, affine=(True, True), shift=2.0, tol=1e-4, plan=None, saved=False):
    # saved: the rows' statistics handed to the backward as the forward saves them
    x = _t((m, n), dtype, 11, 1.0, shift)
    w = _t((n,), dtype, 1, 0.5, 1.0) if affine[0] else None
    b = _t((n,), dtype, 2) if affine[1] and op == "layer_norm" else None
    dy = _t((m, n), dtype, 12)
    backward = NB.make_backward(op, m, n, dtype, n, 1e-5, w is not None, b is not None, split=split, plan=plan)
    extra = (_row_stats(op, x),) if saved else ()
    got = backward(dy, x, w, b, None, *extra) if op == "layer_norm" else backward(dy, x, w, None, *extra)
    leaves = [None if t is None else t.double().requires_grad_() for t in (x, w, b)]
    ref = (F.rms_norm(leaves[0], (n,), leaves[1], 1e-5) if op == "rms_norm"
           else F.layer_norm(leaves[0], (n,), leaves[1], leaves[2], 1e-5))
    ref.backward(dy.double())
    for ours, leaf in zip(got, leaves):
        if leaf is None:
            assert ours is None
            continue
        assert ours.dtype == dtype
        scale = leaf.grad.abs().max().clamp_min(1)
        torch.testing.assert_close(ours.double() / scale, leaf.grad / scale, rtol=tol, atol=tol)


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("split", [None, (1, 2048), (2, 1024), (3, 4096)],
                         ids=["default", "one-group", "groups2", "groups3-one-chunk"])
def test_long_row_backward_paths(op, split):
    # 9000 > the rows held in registers: (row groups, chunks of columns) in two launches,
    # a ragged last chunk; 3 groups of 5 rows: groups of unequal row counts
    _backward_vs_torch(op, 5, 9000, F32, split)
    cpu = torch.device("cpu")
    long_rows = NP.backward_plan(2, 262144, F32, cpu)
    assert long_rows["kind"] == "split" and long_rows["S"] > 1  # long rows: cut in chunks
    assert NP.backward_plan(64, 4096, F32, cpu)["kind"] == "rows"  # rows in registers


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("split,plan", [(None, None), ((1, 2048), None), ((3, 4096), None),
                                        ((2, 1024), dict(COOP=True))],
                         ids=["default", "one-group", "groups3", "groups2-coop"])
@pytest.mark.parametrize("dtype", [F32, BF16])
def test_long_row_backward_with_the_forwards_statistics(op, split, plan, dtype):
    # long rows: the backward asks the forward for each row's statistics (saves) and, given them,
    # exchanges sums of g * xhat (and g) only; rows far from zero (shift 2); COOP=True: the one
    # launch on a GPU, the two launches under the interpreter
    tol = 1e-4 if dtype == F32 else 3e-2
    _backward_vs_torch(op, 5, 9000, dtype, split, plan=plan, saved=True, tol=tol)
    backward = NB.make_backward(op, 5, 9000, dtype, 9000, 1e-5, True, op == "layer_norm", split=split, plan=plan)
    x = _t((5, 9000), dtype, 11)
    (buf,) = backward.saves(x, None)
    assert buf.dtype == F32 and buf.shape == (5 if op == "rms_norm" else 10,) and buf.device == x.device
    # the statistics given are the ones used: a wrong rstd gives a wrong dx
    dy, w = _t((5, 9000), dtype, 12), _t((9000,), dtype, 1, 0.5, 1.0)
    tail = (None, None) if op == "layer_norm" else (None,)
    right = backward(dy, x, w, *tail, _row_stats(op, x))[0]
    wrong = _row_stats(op, x)
    wrong[:5] *= 2
    assert not torch.allclose(backward(dy, x, w, *tail, wrong)[0].float(), right.float(), rtol=0.1, atol=0.1)


def test_short_row_backward_recomputes_its_statistics():
    # rows held in registers: the backward asks for nothing (the statistics cost no read there)
    assert not hasattr(NB.make_backward("layer_norm", 4, 4096, F32, 4096, 1e-5, True, True), "saves")
    assert not hasattr(NB.make_backward("rms_norm", 4, 40000, F32, 40000, 1e-5, True, False,
                                        plan=dict(SAVED=False)), "saves")


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("config", [dict(BLOCK_N=64, ROWS=2), dict(BLOCK_N=64, ROWS=2, PERSIST=1),
                                    dict(BLOCK_N=16), dict(BLOCK_N=16, PREFETCH=1, HINTS=1), dict(BLOCK_N=16, SPLIT=2),
                                    dict(BLOCK_N=16, COOP=1)],
                         ids=["rows", "persistent", "chunked", "chunked-prefetch", "split", "coop"])
def test_forward_saves_each_rows_statistics(op, config):
    # every forward path, asked with saved=(buffer,), stores each row's rstd (and layer_norm's mean
    # after them) and nothing else, and writes the output it writes without (to the rounding: the
    # two are compiled apart, and a GPU may contract their arithmetic differently)
    m, n = 5, 40
    cfg = dict(dict(ROWS=1, SPLIT=1, num_warps=1), **config)
    x, w, b = _t((m, n), F32, 3, 2.0, 1.5), _t((n,), F32, 1, 0.5, 1.0), _t((n,), F32, 2)
    launcher = N.NormLauncher(op, m, n, F32, n, DEV, cfg, 1e-5, True, op == "layer_norm", (m, n))
    buf = torch.full((2 * m + 1,), float("nan"), device=DEV)
    y = launcher.run(x, w, b if op == "layer_norm" else None, saved=(buf,))
    torch.testing.assert_close(y, launcher.run(x, w, b if op == "layer_norm" else None), rtol=1e-6, atol=1e-6)
    want = _row_stats(op, x)
    torch.testing.assert_close(buf[:want.numel()], want, rtol=1e-5, atol=1e-5)
    assert buf[want.numel():].isnan().all()


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_autograd_keeps_the_forwards_statistics_for_long_rows(op):
    # through dispatch: the Triton forward fills the buffer its backward asked for, and the graph
    # keeps it (saved after the output)
    m, n = 3, 9000
    x = _t((m, n), F32, 5, 1.0, 3.0).requires_grad_()
    args = _args(op, x, (n,), True, op == "layer_norm")
    y = getattr(dispatch, op)(*args, backend="triton")
    torch.testing.assert_close(y.grad_fn.saved_tensors[-1], _row_stats(op, x.detach()), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("m,n", [(7, 1), (9, 24), (5, 100), (11, 1000)])
def test_backward_rows_in_registers(op, m, n):
    # several rows per tile (short rows), a row per tile, N = 1; more tiles than programs
    plan = NP.backward_plan(m, n, F32, torch.device("cpu"))
    assert plan["kind"] == "rows" and plan["G"] <= 4
    _backward_vs_torch(op, m, n, F32, None)


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("affine", [(False, False), (True, False), (False, True)], ids=["plain", "w", "b"])
@pytest.mark.parametrize("split", [None, (2, 64)], ids=["rows", "split"])
def test_backward_bf16_and_absent_parameters(op, affine, split):
    _backward_vs_torch(op, 6, 200, BF16, split, affine, shift=0.5, tol=3e-2)


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("plan,split", [
    (dict(ROWS=1), None), (dict(num_warps=2, G=3), None), (dict(EVICT=False, maxnreg=None, num_stages=2), None),
    (dict(PREFETCH=True, G=3), None), (dict(PREFETCH=True, ROWS=1), None),
    (dict(STAGES=3, G=3), None), (dict(PREFETCH=False, STAGES=2, ROWS=1), None), (dict(FINISH=1, G=3), None),
    (dict(FINISH=1, ROWS=1), None),
    (dict(BLOCK_N=32, num_warps=2, GR=3), (2, 64)), (dict(BLOCK_N=32, GR=2, HINTS=True, PREFETCH=True), (2, 64)),
    (dict(BLOCK_N=64, GR=4, PREFETCH=True), (2, 64)), (dict(BLOCK_N=64, maxnreg=None), (2, 64)),
], ids=["rows1", "warps2-g3", "no-evict", "prefetch-g3", "prefetch-rows1", "stages3-g3", "stages2-rows1", "finish-g3",
        "finish-rows1",
        "split-bn32-gr3", "split-hints-prefetch",
        "split-prefetch-gr4", "split-no-maxnreg"])
@pytest.mark.parametrize("dtype", [F32, BF16])
def test_backward_plan_overrides(op, plan, split, dtype):
    # 9 rows of 100: ROWS=1 (the default packs 16 rows of 128 a tile), more tiles than programs
    _backward_vs_torch(op, 9, 100, dtype, split, shift=0.5, tol=1e-4 if dtype == F32 else 3e-2, plan=plan)
    built = NP.backward_plan(9, 100, dtype, torch.device("cpu"), split, plan)
    assert all(built[k] == v for k, v in plan.items())


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("dtype", [F32, BF16])
def test_the_one_launch_exchange_runs_on_a_gpu_only(op, dtype):
    # on a GPU, the long-row backward in one launch whose programs exchange their sums (5 chunks a
    # row, 7 rows over 2 groups); the interpreter runs programs one after another, where a group's
    # sums could never meet: there a COOP plan resolves to the two-launch path
    plan = NP.backward_plan(7, 300, dtype, DEV, (2, 64), dict(COOP=True))
    assert plan["kind"] == "split" and plan["COOP"] is (DEV.type == "cuda")
    _backward_vs_torch(op, 7, 300, dtype, (2, 64), shift=0.5, tol=1e-4 if dtype == F32 else 3e-2, plan=dict(COOP=True))
    if DEV.type == "cuda":  # again: the next launch's words carry a new tag, the old ones never count
        _backward_vs_torch(op, 7, 300, dtype, (2, 64), shift=0.5, tol=1e-4 if dtype == F32 else 3e-2,
                           plan=dict(COOP=True))


@pytest.mark.skipif(DEV.type != "cuda", reason="the one-launch exchange runs on a GPU only")
@pytest.mark.parametrize("op,m,n", [("rms_norm", 256, 65536), ("rms_norm", 1024, 16384), ("layer_norm", 256, 65536),
                                    ("layer_norm", 64, 262144)])
def test_one_launch_backward_is_exact_whatever_ran_before(op, m, n):
    # a row's partials are awaited while other programs still publish them, and the words left
    # in the slot buffer are another launch's (other numbers): every call must give the same bits
    # for the same input, whether calls alternate between two inputs on a stream or a CUDA graph
    # (whose private buffer starts zeroed) replays the backward
    def call(x, w, dy):
        xl, wl = x.clone().requires_grad_(), w.clone().requires_grad_()
        y = getattr(dispatch, op)(xl, [n], wl, backend="triton")
        return y, xl, wl, dy
    inputs = [(_t((m, n), F32, s, 1.0 + s, s), _t((n,), F32, s + 1, 0.5, 1.0), _t((m, n), F32, s + 2))
              for s in (0, 3)]
    first = []
    for x, w, dy in inputs:
        assert NP.backward_plan(m, n, F32, DEV)["COOP"]
        y, xl, wl, dy = call(x, w, dy)
        first.append(torch.autograd.grad(y, [xl, wl], dy))
        xd = x.double().requires_grad_()
        ref = F.rms_norm(xd, (n,), w.double()) if op == "rms_norm" else F.layer_norm(xd, (n,), w.double())
        gx, = torch.autograd.grad(ref, [xd], dy.double())
        scale = gx.abs().max()
        torch.testing.assert_close(first[-1][0].double() / scale, gx / scale, rtol=1e-4, atol=1e-4)
    for _ in range(3):
        for (x, w, dy), want in zip(inputs, first):
            y, xl, wl, dy = call(x, w, dy)
            for got, exp in zip(torch.autograd.grad(y, [xl, wl], dy), want):
                differ = int((got != exp).sum())
                assert differ == 0, f"{op} {m}x{n}: a repeated backward differs in {differ} values"
    stream = torch.cuda.Stream(DEV)
    stream.wait_stream(torch.cuda.current_stream(DEV))
    with torch.cuda.stream(stream):
        y, xl, wl, dy = call(*inputs[0])
        torch.autograd.grad(y, [xl, wl], dy, retain_graph=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            captured = torch.autograd.grad(y, [xl, wl], dy, retain_graph=True)
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize(DEV)
        for got, exp in zip(captured, first[0]):
            differ = int((got != exp).sum())
            assert differ == 0, f"{op} {m}x{n}: a replayed backward differs in {differ} values"


def test_long_row_backward_default_exchanges_on_a_gpu_only():
    # a GPU's default for long rows is the one-launch exchange (16 elements a thread, 8 for fp32
    # rows, 128 registers); the interpreter's is the two launches (8 elements a thread)
    for (m, n), dtype in itertools.product(((64, 262144), (1024, 16384)), (BF16, F32)):
        plan = NP.backward_plan(m, n, dtype, DEV)
        assert plan["kind"] == "split" and plan["COOP"] is (DEV.type == "cuda")
        per_warp = 512 if plan["COOP"] and dtype == BF16 else 256
        assert (plan["maxnreg"], plan["BLOCK_N"] // plan["num_warps"]) == (128 if plan["COOP"] else 64, per_warp)
        # the column sums: in the exchange's launch by 256 of its programs (not for fp32 rows of
        # 16384), else by a second launch
        assert plan["FINISH"] == (256 if plan["COOP"] and (dtype == BF16 or n > 16384) else 0)
    # rms_norm's fp32 rows longer than 65536, 64 rows or more, exchange at 80 registers (more
    # programs resident)
    for op, m, n, regs in (("rms_norm", 64, 262144, 80), ("rms_norm", 64, 65536, 128), ("rms_norm", 8, 131072, 128),
                           ("layer_norm", 64, 262144, 128)):
        plan = NP.backward_plan(m, n, F32, DEV, op=op)
        assert plan["maxnreg"] == (regs if plan["COOP"] else 64), (op, m, n, plan)
    # layer_norm's 2-byte rows in 2048-element chunks at 168 (three programs a multiprocessor: fewer
    # groups)
    for op, n, dtype, regs in (("layer_norm", 16384, BF16, 168), ("layer_norm", 10000, torch.float16, 168),
                               ("layer_norm", 32768, BF16, 168), ("rms_norm", 16384, BF16, 128),
                               ("layer_norm", 16384, F32, 128)):
        plan = NP.backward_plan(1024, n, dtype, DEV, op=op)
        assert plan["maxnreg"] == (regs if plan["COOP"] else 64), (op, n, dtype, plan)
        if plan["COOP"]:
            assert plan["GR"] * plan["S"] <= NP._resident_per_sm(plan["num_warps"], regs) * NP._sms(DEV)


def test_few_long_rows_exchange_in_smaller_chunks(monkeypatch):
    # a GPU's plan (132 multiprocessors, outside the interpreter): rows longer than 65536, 32 rows
    # or fewer, exchange in 1024-element chunks at 8 elements a thread (layer_norm's rows and
    # rms_norm's fp32 rows); more rows, rms_norm's 2-byte rows and rows of up to 65536 keep 2048 at
    # 16 (fp32: 8), a row whose 1024-element chunks the device can't hold at once too rather than
    # leave the one launch. layer_norm's 2-byte rows in 2048-element chunks exchange at 168
    # registers, at 128 where the row's chunks would not fit at once at 168
    monkeypatch.setattr(NP, "_sms", lambda device: 132)
    monkeypatch.setattr(NP, "_interpreting", lambda: False)
    gpu = torch.device("cuda")
    cases = (("layer_norm", 8, 131072, BF16, 1024, 128), ("layer_norm", 32, 65537, torch.float16, 1024, 128),
             ("layer_norm", 1, 262144, BF16, 1024, 128), ("layer_norm", 33, 131072, BF16, 2048, 168),
             ("layer_norm", 8, 65536, BF16, 2048, 168), ("layer_norm", 8, 131072, F32, 1024, 128),
             ("rms_norm", 8, 131072, F32, 1024, 128), ("rms_norm", 2, 100000, F32, 1024, 128),
             ("rms_norm", 33, 131072, F32, 2048, 128), ("rms_norm", 8, 131072, BF16, 2048, 128),
             ("layer_norm", 4, 1 << 20, BF16, 2048, 128))
    for op, m, n, dtype, block, regs in cases:
        plan = NP.backward_plan(m, n, dtype, gpu, grads=2 if op == "layer_norm" else 1, op=op)
        assert plan["COOP"] and (plan["BLOCK_N"], plan["maxnreg"]) == (block, regs), (op, m, n, dtype, plan)
        per_thread = 8 if block == 1024 or dtype == F32 else 16
        assert plan["BLOCK_N"] // (32 * plan["num_warps"]) == per_thread, (op, m, n, dtype, plan)
        assert plan["GR"] * plan["S"] <= NP._resident_per_sm(plan["num_warps"], plan["maxnreg"]) * 132
    # an override of the chunk keeps its own warps rule
    assert NP.backward_plan(8, 131072, BF16, gpu, overrides=dict(BLOCK_N=2048), grads=2, op="layer_norm")[
        "num_warps"] == 4


@pytest.mark.skipif(DEV.type != "cuda", reason="the one-launch exchange runs on a GPU only")
@pytest.mark.parametrize("op,dtype", [("layer_norm", BF16), ("layer_norm", torch.float16), ("layer_norm", F32),
                                      ("rms_norm", F32)])
@pytest.mark.parametrize("m,n", [(1, 70000), (5, 131072), (32, 131072 + 300)])
def test_few_long_rows_backward(op, m, n, dtype):
    # the default plan of few long rows (1024-element chunks; a ragged last one) against float64
    assert NP.backward_plan(m, n, dtype, DEV, grads=2 if op == "layer_norm" else 1, op=op)["BLOCK_N"] == 1024
    tol = 1e-2 if dtype != F32 else 1e-4
    _backward_vs_torch(op, m, n, dtype, None, shift=0.5, tol=tol)
    _backward_vs_torch(op, m, n, dtype, None, shift=0.5, tol=tol, saved=True)


def test_long_row_finish_needs_the_one_launch_exchange():
    # FINISH on long rows is refused where the two launches would run them (forced here; the
    # interpreter's every long row), and beyond the one launch's programs
    if DEV.type != "cuda" and not N._interpreting():
        pytest.skip("checked on the device that runs the plan")
    with pytest.raises(ValueError, match="FINISH=2.*COOP"):
        NP.backward_plan(9, 100, F32, DEV, split=(2, 64), overrides=dict(FINISH=2))
    if DEV.type == "cuda":
        plan = NP.backward_plan(4, 262144, BF16, DEV)
        over = 2 * plan["GR"] * plan["S"]
        with pytest.raises(ValueError, match=f"FINISH={over}.*{plan['GR'] * plan['S']} programs"):
            NP.backward_plan(4, 262144, BF16, DEV, overrides=dict(FINISH=over))


@pytest.mark.parametrize("plan,split,match", [
    (dict(ROWS=1, WARPS=4), None, "WARPS=4"), (dict(GR=2), None, "GR=2"), (dict(ROWS=3), None, "ROWS=3"),
    (dict(EVICT=1), None, "EVICT=1"), (dict(num_warps=0), None, "num_warps=0"), (dict(ROWS=2), (2, 64), "ROWS=2"),
    (dict(BLOCK_N=48), (2, 64), "BLOCK_N=48"), (dict(STAGES=3, PREFETCH=True), None, "STAGES=3.*PREFETCH=False"),
    (dict(STAGES=0, PREFETCH=False), None, "STAGES=0"), (dict(STAGES=2), (2, 64), "STAGES=2"),
    (dict(FINISH=3), None, "FINISH=3.*power of two"), (dict(FINISH=256), None, "FINISH=256.*BLOCK_N=128"),
])
def test_backward_plan_override_refused(plan, split, match):
    with pytest.raises(ValueError, match=match):
        NB.make_backward("rms_norm", 9, 100, F32, 100, 1e-5, True, False, split=split, plan=plan)


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("config", [dict(BLOCK_N=16, SPLIT=1), dict(BLOCK_N=16, SPLIT=4), dict(BLOCK_N=32, SPLIT=2)],
                         ids=["chunked", "split4", "split2"])
def test_forced_chunked_and_split_paths(op, config):
    m, n = 3, 100  # 100 = 6.25 chunks of 16: a ragged last chunk and segments of unequal length
    x = _t((m, n), F32, 6, 2.0, 5.0)
    w, b = _t((n,), F32, 1), _t((n,), F32, 2)
    cfg = dict(ROWS=1, num_warps=1, num_stages=1, **config)
    launcher = N.NormLauncher(op, m, n, F32, n, DEV, cfg, 1e-5, True, op == "layer_norm", (m, n))
    y = launcher.run(x, w, b if op == "layer_norm" else None)
    ref = F.rms_norm(x, (n,), w, 1e-5) if op == "rms_norm" else F.layer_norm(x, (n,), w, b, 1e-5)
    torch.testing.assert_close(y, ref, **TOL[F32])


@pytest.mark.parametrize("n,config", [(100, dict(BLOCK_N=16, SPLIT=1, LANES=1)),
                                      (100, dict(BLOCK_N=16, SPLIT=4, LANES=1)),
                                      (70, dict(BLOCK_N=16, SPLIT=4, LANES=1, PREFETCH=1))],
                         ids=["chunked", "split4", "split4-empty-segment"])
def test_layer_norm_statistics_by_lanes(n, config):
    # LANES: each lane's running (mean, M2) merged at the end, for a whole row (chunked) or a
    # segment (split); 70 = 5 chunks of 16 in segments of two: the fourth segment holds none
    m = 3
    x = _t((m, n), F32, 6, 2.0, 5.0)
    w, b = _t((n,), F32, 1), _t((n,), F32, 2)
    launcher = N.NormLauncher("layer_norm", m, n, F32, n, DEV, dict(ROWS=1, num_warps=1, num_stages=1, **config),
                              1e-5, True, True, (m, n))
    ref = F.layer_norm(x, (n,), w, b, 1e-5)
    torch.testing.assert_close(launcher.run(x, w, b), ref, **TOL[F32])
    stats = torch.full((2 * m,), float("nan"), device=DEV)  # with the rows' statistics saved too: rstd, then mean
    torch.testing.assert_close(launcher.run(x, w, b, (stats,)), ref, **TOL[F32])
    xd = x.double()
    torch.testing.assert_close(stats.double(), torch.cat([(xd.var(1, unbiased=False) + 1e-5).rsqrt(), xd.mean(1)]),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("config", [dict(BLOCK_N=64, ROWS=2, PERSIST=1), dict(BLOCK_N=128, ROWS=1, PERSIST=2),
                                    dict(BLOCK_N=64, ROWS=4, PERSIST=0), dict(BLOCK_N=64, ROWS=2, PERSIST=1, STAGES=3),
                                    dict(BLOCK_N=128, ROWS=1, PERSIST=2, STAGES=2, WB_EACH=1, ONE_SUM=1)],
                         ids=["persist1-rows2", "persist2", "rows4", "persist1-stages3", "persist2-stages2-wb-each"])
def test_forced_rows_in_registers_paths(op, dtype, config):
    # persistent programs walking several tiles (the last one ragged), and tiles of several rows
    m, n = 9, 40
    x = _t((m, n), dtype, 6, 2.0, 5.0)
    w, b = _t((n,), dtype, 1), _t((n,), dtype, 2)
    cfg = dict(SPLIT=1, num_warps=1, num_stages=1, **config)
    launcher = N.NormLauncher(op, m, n, dtype, n, DEV, cfg, 1e-5, True, op == "layer_norm", (m, n))
    y = launcher.run(x, w, b if op == "layer_norm" else None)
    ref = (F.rms_norm(x.double(), (n,), w.double(), 1e-5) if op == "rms_norm"
           else F.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5))
    torch.testing.assert_close(y.double(), ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("affine", [(False, False), (True, False), (True, True)], ids=["plain", "w", "wb"])
@pytest.mark.parametrize("config", [dict(BLOCK_N=16, SPLIT=1, PREFETCH=1), dict(BLOCK_N=16, SPLIT=1, HINTS=1),
                                    dict(BLOCK_N=16, SPLIT=4, PREFETCH=1, HINTS=1),
                                    dict(BLOCK_N=32, SPLIT=2, PREFETCH=1),
                                    dict(BLOCK_N=128, SPLIT=1, ROWS=2, PERSIST=1, HINTS=1),
                                    dict(BLOCK_N=128, SPLIT=1, HINTS=1, PREFETCH=1)],
                         ids=["chunked-prefetch", "chunked-hints", "split4-both", "split2-prefetch",
                              "persist-hints", "rows-both"])
def test_prefetch_and_hints_options(op, dtype, affine, config):
    # N = 101: odd, a ragged last chunk (16: 7 chunks, 32: 4), segments of unequal length; M = 5
    m, n = 5, 101
    weight, bias = affine
    bias = bias and op == "layer_norm"
    x = _t((m, n), dtype, 6, 2.0, 5.0)
    w = _t((n,), dtype, 1) if weight else None
    b = _t((n,), dtype, 2) if bias else None
    cfg = dict(dict(ROWS=1, num_warps=1, num_stages=1), **config)
    launcher = N.NormLauncher(op, m, n, dtype, n, DEV, cfg, 1e-5, weight, bias, (m, n))
    y = launcher.run(x, w, b)
    wd = None if w is None else w.double()
    ref = (F.rms_norm(x.double(), (n,), wd, 1e-5) if op == "rms_norm"
           else F.layer_norm(x.double(), (n,), wd, None if b is None else b.double(), 1e-5))
    torch.testing.assert_close(y.double(), ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("affine", [(False, False), (True, True)], ids=["plain", "wb"])
@pytest.mark.parametrize("m,n,bn", [(5, 101, 16), (5, 101, 32), (1, 64, 16), (4, 8, 16)],
                         ids=["ragged7", "ragged4", "one-row", "one-chunk"])
@pytest.mark.parametrize("wb_each", [0, 1], ids=["wb_held", "wb_each"])
def test_cooperative_path(op, dtype, affine, m, n, bn, wb_each):
    # COOP: a row's chunks held by a group of programs that exchange their partials; odd N gives a
    # ragged last chunk (its mean over fewer elements), M = 5 over two groups walks rows 0, 2, 4 /
    # 1, 3 (the partial of a program's next row published before this row's are awaited);
    # WB_EACH: the weight and bias loaded for each row's output instead of held
    weight, bias = affine
    if wb_each and not weight:
        pytest.skip("WB_EACH loads a weight or bias: none here")
    bias = bias and op == "layer_norm"
    x = _t((m, n), dtype, 6, 2.0, 5.0)
    w = _t((n,), dtype, 1) if weight else None
    b = _t((n,), dtype, 2) if bias else None
    cfg = dict(BLOCK_N=bn, ROWS=1, SPLIT=1, num_warps=1, num_stages=1, COOP=1, WB_EACH=wb_each)
    launcher = N.NormLauncher(op, m, n, dtype, n, DEV, cfg, 1e-5, weight, bias, (m, n))
    for _ in range(2):  # a second launch finds the slot buffer the first one left
        y = launcher.run(x, w, b)
        wd = None if w is None else w.double()
        ref = (F.rms_norm(x.double(), (n,), wd, 1e-5) if op == "rms_norm"
               else F.layer_norm(x.double(), (n,), wd, None if b is None else b.double(), 1e-5))
        torch.testing.assert_close(y.double(), ref, **TOL[dtype])


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_cooperative_path_strided_rows_far_from_zero(op):
    # rows that are slices of a wider tensor, values 1000 + O(0.01): a variance from the chunks'
    # sums of squares would cancel; the chunks' (mean, M2) pairs must not
    m, n, bn = 3, 100, 16
    base = _t((m, 2 * n), F32, 9, 0.01, 1000.0)
    x = base[:, 10:10 + n]
    w = _t((n,), F32, 1)
    before = base.clone()
    cfg = dict(BLOCK_N=bn, ROWS=1, SPLIT=1, num_warps=1, num_stages=1, COOP=1)
    launcher = N.NormLauncher(op, m, n, F32, 2 * n, DEV, cfg, 1e-6, True, False, (m, n))
    y = launcher.run(x, w, None)
    ref = F.rms_norm(x.double(), (n,), w.double(), 1e-6) if op == "rms_norm" else \
        F.layer_norm(x.double(), (n,), w.double(), None, 1e-6)
    torch.testing.assert_close(y.double(), ref, rtol=1e-4, atol=1e-4)
    assert torch.equal(base, before)  # the input is only read


def _massive(m, n, dtype, where, value=3e4):
    # rows with "massive activations", elements far from the rest: at the first element (summed
    # about it, every other element is about -value, and sum d^2 / N - (sum d / N)^2 cancels to a
    # few digits), or at the first and last, which move two of the three groups whose means' median
    # is the kernels' shift (head, middle, tail) by value / 16, many spreads off the row's mean, so
    # that their second pass about the mean must run
    x = _t((m, n), F32, 21)
    x[:, 0] = value
    if where == "first-and-last":
        x[:, -1] = value
    return x.to(dtype)


@pytest.mark.parametrize("where", ["first", "first-and-last"])
@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("config", [dict(BLOCK_N=4096, SPLIT=1), dict(BLOCK_N=4096, SPLIT=1, PREFETCH=1),
                                    dict(BLOCK_N=4096, SPLIT=1, LANES=1),
                                    dict(BLOCK_N=4096, SPLIT=1, PREFETCH=1, HINTS=1, LANES=1),
                                    dict(BLOCK_N=4096, SPLIT=4), dict(BLOCK_N=4096, SPLIT=4, PREFETCH=1, LANES=1),
                                    dict(BLOCK_N=4096, SPLIT=1, COOP=1)],
                         ids=["chunked", "chunked-prefetch", "chunked-lanes", "chunked-lanes-prefetch", "split4",
                              "split4-lanes", "coop"])
def test_layer_norm_of_rows_with_massive_elements(config, dtype, where):
    m, n = 3, 40000
    x = _massive(m, n, dtype, where)
    w, b = _t((n,), dtype, 1, 0.5, 1.0), _t((n,), dtype, 2)
    cfg = dict(ROWS=1, num_warps=4, num_stages=1, **config)
    launcher = N.NormLauncher("layer_norm", m, n, dtype, n, DEV, cfg, 1e-5, True, True, (m, n))
    # fp32: first and last massive, the shift lands on them and the mean is a few ulps of 3e4 off,
    # as torch's is (4e-5 there)
    _assert_layer_norm_close(launcher.run(x, w, b), x, w, b)


def _assert_layer_norm_close(y, x, w, b):
    # y against layer_norm in float64; fp32 within twice torch's own fp32 error where that is larger
    n = x.shape[-1]
    ref = F.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5)
    tol = dict(TOL[x.dtype])
    if x.dtype == F32:
        theirs = F.layer_norm(x, (n,), w, b, 1e-5).double()
        tol["atol"] = max(tol["atol"], 2 * (theirs - ref).abs().max().item())
    torch.testing.assert_close(y.double(), ref, **tol)


@pytest.mark.parametrize("where", ["first", "first-and-last"])
@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("n,config", [(4000, dict(BLOCK_N=4096, ROWS=1)), (1000, dict(BLOCK_N=1024, ROWS=4)),
                                      (1000, dict(BLOCK_N=1024, ROWS=4, PERSIST=1)),
                                      (4000, dict(BLOCK_N=4096, ROWS=1, ONE_SUM=1)),
                                      (1000, dict(BLOCK_N=1024, ROWS=4, ONE_SUM=1)),
                                      (1000, dict(BLOCK_N=1024, ROWS=4, PERSIST=1, ONE_SUM=1))],
                         ids=["row", "tile4", "tile4-persistent", "row-one-sum", "tile4-one-sum",
                              "tile4-persistent-one-sum"])
def test_layer_norm_held_in_registers_of_rows_with_massive_elements(n, config, dtype, where):
    # rows held whole in registers (a row, a tile of four, a persistent grid of tiles); rows 1 and 6
    # massive, the others not, so a tile holds both kinds. ONE_SUM: the statistics from one
    # reduction of x and x^2; a massive element moves a row's mean by less than its spread, so they
    # are kept (rows far from zero, which are summed again: test_register_cap_one_sum_and_wb_each_options)
    m = 7
    x = _t((m, n), F32, 22)
    x[1:7:5] = _massive(2, n, F32, where)
    x = x.to(dtype)
    w, b = _t((n,), dtype, 1, 0.5, 1.0), _t((n,), dtype, 2)
    launcher = N.NormLauncher("layer_norm", m, n, dtype, n, DEV, dict(SPLIT=1, num_warps=4, num_stages=1, **config),
                              1e-5, True, True, (m, n))
    _assert_layer_norm_close(launcher.run(x, w, b), x, w, b)


@pytest.mark.parametrize("split,plan,where", [((1, 4096), None, "first"), ((2, 8192), dict(COOP=True), "first"),
                                              ((2, 8192), dict(COOP=True), "first-and-last")],
                         ids=["one-group", "groups2-coop", "groups2-coop-shift-on-massive"])
def test_layer_norm_backward_of_rows_with_massive_elements(split, plan, where):
    # COOP=True: the one-launch exchange on a GPU, the two launches under the interpreter
    m, n = 3, 40000
    x = _massive(m, n, F32, where)
    w, b, dy = _t((n,), F32, 1, 0.5, 1.0), _t((n,), F32, 2), _t((m, n), F32, 12)
    backward = NB.make_backward("layer_norm", m, n, F32, n, 1e-5, True, True, split=split, plan=plan)
    got = backward(dy, x, w, b, None)
    leaves = [t.double().requires_grad_() for t in (x, w, b)]
    F.layer_norm(leaves[0], (n,), leaves[1], leaves[2], 1e-5).backward(dy.double())
    for ours, leaf in zip(got, leaves):
        scale = leaf.grad.abs().max().clamp_min(1)
        torch.testing.assert_close(ours.double() / scale, leaf.grad / scale, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [1, 5, 15, 17, 40])
@pytest.mark.parametrize("config", [dict(BLOCK_N=4), dict(BLOCK_N=4, PREFETCH=1), dict(BLOCK_N=4, SPLIT=2),
                                    dict(BLOCK_N=4, SPLIT=2, LANES=1), dict(BLOCK_N=4, COOP=1),
                                    "backward-chunks", "backward-chunks-coop"],
                         ids=["chunked", "chunked-prefetch", "split2", "split2-lanes", "coop", "backward",
                              "backward-coop"])
def test_layer_norm_shift_reads_its_row_only(config, n):
    # the row shift is the median of the means of three groups of 16 elements (head, middle, tail),
    # cut to the row where it is shorter, overlapping where it is shorter than 48: rows that are
    # slices of a wider tensor, NaN everywhere else, and far from zero (1000 + O(1)). A group read
    # past its row makes a NaN
    m = 3
    base = torch.full((m, n + 40), float("nan"), dtype=F32, device=DEV)
    base[:, 20:20 + n] = _t((m, n), F32, 9, 1.0, 1000.0)
    x = base[:, 20:20 + n]
    w, b, dy = _t((n,), F32, 1, 0.5, 1.0), _t((n,), F32, 2), _t((m, n), F32, 12)
    before = base.clone()
    leaves = [t.double().requires_grad_() for t in (x, w, b)]
    ref = F.layer_norm(leaves[0], (n,), leaves[1], leaves[2], 1e-5)
    if isinstance(config, str):
        plan = dict(COOP=True) if config.endswith("coop") else None
        backward = NB.make_backward("layer_norm", m, n, F32, n + 40, 1e-5, True, True, split=(1, 4), plan=plan)
        got = backward(dy, x, w, b, None)
        ref.backward(dy.double())
        for ours, leaf in zip(got, leaves):
            scale = leaf.grad.abs().max().clamp_min(1)
            torch.testing.assert_close(ours.double() / scale, leaf.grad / scale, rtol=1e-4, atol=1e-4)
    else:
        cfg = dict(dict(ROWS=1, SPLIT=1, num_warps=1, num_stages=1), **config)
        y = N.NormLauncher("layer_norm", m, n, F32, n + 40, DEV, cfg, 1e-5, True, True, (m, n)).run(x, w, b)
        _assert_layer_norm_close(y, x, w, b)
    assert torch.equal(base.isnan(), before.isnan()) and torch.equal(base.nan_to_num(), before.nan_to_num())


@pytest.mark.parametrize("dtype", [BF16, torch.float16])
@pytest.mark.parametrize("rows", ["normal", "far", "first", "first-and-last"])
def test_cooperative_path_with_packed_partials(dtype, rows):
    # PACK: a chunk's (sum d, M2) as one word, each kept to 16 significant bits, for a 2-byte result:
    # within the dtype's tolerance of float64 and no further from it than the two-word exchange by
    # more than a rounding of the output. "far": rows at 300 with a spread of 1 (the shift matters);
    # first / first-and-last: massive elements (the shift lands on them: every chunk's sums are large)
    m, n = 3, 40000
    if rows in ("normal", "far"):
        x = _t((m, n), F32, 23, 1.0, 300.0 if rows == "far" else 0.5).to(dtype)
    else:
        x = _massive(m, n, dtype, rows)
    w, b = _t((n,), dtype, 1, 0.5, 1.0), _t((n,), dtype, 2)
    ref = F.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5)
    errs = []
    for pack in (0, 1):
        cfg = dict(BLOCK_N=4096, ROWS=1, SPLIT=1, num_warps=4, num_stages=1, COOP=1, PACK=pack)
        y = N.NormLauncher("layer_norm", m, n, dtype, n, DEV, cfg, 1e-5, True, True, (m, n)).run(x, w, b)
        torch.testing.assert_close(y.double(), ref, **TOL[BF16])
        errs.append(float((y.double() - ref).abs().max()))
    ulp = float(ref.abs().max()) * torch.finfo(dtype).eps
    assert errs[1] <= errs[0] + ulp, errs


def test_packed_and_plain_exchanges_share_a_stream_slot_buffer(monkeypatch):
    # launches of both word formats (and of other shapes) in turn on one stream's slot buffer, which
    # is zeroed every third launch here: no launch takes a word another left for one of its own
    # (each result as its first, and right)
    from dispatch_triton import buffers

    monkeypatch.setattr(buffers, "_EPOCH_RESET", 3)
    cases = []
    for i, (m, n, bn, pack) in enumerate(((4, 300, 64, 1), (3, 500, 128, 0), (6, 300, 64, 1), (2, 260, 32, 0))):
        x, w, b = _t((m, n), BF16, 30 + i, 1.0, 0.5), _t((n,), BF16, 40 + i), _t((n,), BF16, 50 + i)
        cfg = dict(BLOCK_N=bn, ROWS=1, SPLIT=1, num_warps=1, num_stages=1, COOP=1, PACK=pack)
        la = N.NormLauncher("layer_norm", m, n, BF16, n, DEV, cfg, 1e-5, True, True, (m, n))
        first = la.run(x, w, b)
        torch.testing.assert_close(first.double(), F.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5),
                                   **TOL[BF16])
        cases.append((la, x, w, b, first))
    for _ in range(3):
        for la, x, w, b, first in cases:
            assert torch.equal(la.run(x, w, b), first)


def test_packed_partials_are_a_tuner_choice_only_where_they_apply():
    # in the space (not the default) for layer_norm's 2-byte results on the COOP path; never for
    # rms_norm, fp32, or a 2-byte input written as float32 (autocast), where NormLauncher refuses it
    def packed(op, dtype, out=None):
        return [c for c in N.config_space(64, 262144, dtype, None, op, out) if c.get("PACK")]

    space = N.config_space(64, 262144, BF16, None, "layer_norm")
    assert not space[0].get("PACK") and len(packed("layer_norm", BF16)) == 1
    assert packed("layer_norm", torch.float16) and N.coop(packed("layer_norm", BF16)[0])
    assert not packed("rms_norm", BF16) and not packed("layer_norm", F32)
    assert not packed("layer_norm", BF16, F32)


@pytest.mark.parametrize("op,dtype,config", [("rms_norm", BF16, dict(COOP=1)), ("layer_norm", F32, dict(COOP=1)),
                                             ("layer_norm", BF16, dict(COOP=0))],
                         ids=["rms_norm", "float32", "not-coop"])
def test_packed_partials_are_refused_where_they_do_not_apply(op, dtype, config):
    cfg = dict(BLOCK_N=16, ROWS=1, SPLIT=1, num_warps=1, num_stages=1, PACK=1, **config)
    with pytest.raises(ValueError, match=r"PACK.*COOP path and a 2-byte result"):
        N.NormLauncher(op, 2, 64, dtype, 64, DEV, cfg, 1e-5, True, False, (2, 64))


def test_cooperative_path_refuses_rows_of_too_many_chunks():
    with pytest.raises(ValueError, match=r"COOP.*at most 128 chunks.*BLOCK_N >= 32"):
        N.NormLauncher("rms_norm", 2, 16 * 129, F32, 16 * 129, DEV,
                       dict(BLOCK_N=16, ROWS=1, SPLIT=1, num_warps=1, COOP=1), 1e-5, False, False, (2, 16 * 129))
    with pytest.raises(ValueError, match="COOP"):
        N.NormLauncher("rms_norm", 2, 64, F32, 64, DEV, dict(BLOCK_N=16, ROWS=1, SPLIT=1, num_warps=1, COOP=2),
                       1e-5, False, False, (2, 64))


@pytest.mark.parametrize("config", [dict(BLOCK_N=64, ROWS=1), dict(BLOCK_N=64, ROWS=1, PERSIST=1),
                                    dict(BLOCK_N=16), dict(BLOCK_N=16, SPLIT=2), dict(BLOCK_N=16, COOP=1)],
                         ids=["rows", "persist", "chunked", "split", "coop"])
def test_every_launch_has_a_value_for_every_kernel_parameter(config):
    # a kernel parameter left to its default cannot be prepacked: the direct launch would never
    # arm and every call would pay the JIT's binding (what a new constexpr with a default causes)
    cfg = dict(dict(ROWS=1, SPLIT=1, num_warps=1, num_stages=1), **config)
    launcher = N.NormLauncher("layer_norm", 5, 40, F32, 40, DEV, cfg, 1e-5, True, True, (5, 40))
    assert launcher.direct
    for d in launcher.direct:
        assert [a for a in d.jit_fn.arg_names[d.n_tensors:] if a not in d.tail] == []


def test_native_autotuner_never_sees_cooperative_configs():
    # one autotuned launch cannot hand the exchange its slot buffer: COOP stays out of its configs
    assert any(N.coop(c) for c in N.config_space(64, 65536, BF16))
    assert not any(N.coop(c) for c in N._universe())


@pytest.mark.parametrize("option,match", [(dict(PREFETCH=2), "PREFETCH"), (dict(ONE_SUM=2), "ONE_SUM"),
                                          (dict(REGS=7), "REGS must be"), (dict(REGS=512), "REGS must be"),
                                          (dict(REGS=64, PERSIST=1), "REGS and PERSIST"), (dict(WB_EACH=3), "WB_EACH"),
                                          (dict(LANES=2), "LANES"),
                                          (dict(STAGES=2), "STAGES pipelines a persistent"),
                                          (dict(STAGES=9, PERSIST=1), "STAGES pipelines a persistent")],
                         ids=["prefetch", "one-sum", "regs-7", "regs-512", "regs-and-persist", "wb-each", "lanes",
                              "stages-alone", "stages-9"])
def test_option_values_are_checked(option, match):
    with pytest.raises(ValueError, match=match):
        N.NormLauncher("rms_norm", 2, 16, F32, 16, DEV, dict(dict(BLOCK_N=16, ROWS=1, SPLIT=1, num_warps=1), **option),
                       1e-5, False, False, (2, 16))


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("config", [dict(BLOCK_N=16, COOP=1, REGS=80), dict(BLOCK_N=128, ROWS=2, REGS=64),
                                    dict(BLOCK_N=128, ROWS=2, ONE_SUM=1), dict(BLOCK_N=128, ONE_SUM=1),
                                    dict(BLOCK_N=128, PERSIST=1, WB_EACH=1),
                                    dict(BLOCK_N=128, ROWS=2, PERSIST=1, WB_EACH=1, ONE_SUM=1),
                                    dict(BLOCK_N=32, LANES=1), dict(BLOCK_N=32, PREFETCH=1, HINTS=1, LANES=1),
                                    dict(BLOCK_N=16, SPLIT=4, LANES=1), dict(BLOCK_N=16, SPLIT=2, PREFETCH=1, LANES=1),
                                    dict(BLOCK_N=16, COOP=1, REGS=96, WB_EACH=1)],
                         ids=["coop-regs", "rows-regs", "tile2-one-sum", "row-one-sum", "persist-wb-each",
                              "persist-tile2-wb-each-one-sum", "chunked-lanes", "chunked-lanes-prefetch",
                              "split4-lanes", "split2-lanes-prefetch", "coop-regs-wb-each"])
@pytest.mark.parametrize("shift", [0.0, 1000.0], ids=["near-zero", "far-from-zero"])
def test_register_cap_one_sum_and_wb_each_options(op, dtype, config, shift):
    # N = 101 (masked lanes). ONE_SUM: rows near zero take the one reduction's statistics; rows far
    # from zero (mean 1000, spread 1) would lose every digit of sum x^2 - (sum x)^2 / N in fp32, so
    # they must be summed again about their mean. LANES: four chunks, the last ragged, each lane's
    # running mean far from zero too; split in four (a segment a chunk, the last ragged; of
    # 7 chunks of 16, 2 a segment, the fourth segment one chunk) or two
    m, n = 5, 101
    x = _t((m, n), dtype, 6, 1.0, shift)
    w, b = _t((n,), dtype, 1), _t((n,), dtype, 2)
    cfg = dict(dict(ROWS=1, SPLIT=1, num_warps=1, num_stages=1), **config)
    launcher = N.NormLauncher(op, m, n, dtype, n, DEV, cfg, 1e-5, True, op == "layer_norm", (m, n))
    y = launcher.run(x, w, b if op == "layer_norm" else None)
    if op == "layer_norm":  # fp32: a mean of 1000 is as far off as torch's own (a few ulps)
        _assert_layer_norm_close(y, x, w, b)
    else:
        torch.testing.assert_close(y.double(), F.rms_norm(x.double(), (n,), w.double(), 1e-5), **TOL[dtype])
    if DEV.type == "cuda" and config.get("REGS"):  # the cap reaches the compiler
        assert all(d.options.get("maxnreg") == config["REGS"] for d in launcher.direct)


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_rows_of_one_element(op):
    x = _t((6, 1), F32, 3, 1.0, 3.0)  # away from 0: rms_norm's eps=None is the fp64 one in the fp64 reference
    _check_fwd_bwd(op, _args(op, x, (1,), True, True), F32)


def test_empty_inputs():
    for shape in ((0, 8), (4, 0)):
        x = torch.empty(shape, device=DEV)
        n = shape[-1]
        y = dispatch.layer_norm(x, [n], backend="triton")
        assert y.shape == shape
        w = torch.ones(n, device=DEV, requires_grad=True)
        xg = x.clone().requires_grad_()
        dispatch.rms_norm(xg, [n], w, backend="triton").sum().backward()
        assert xg.grad.shape == shape and torch.equal(w.grad, torch.zeros(n, device=DEV))


def test_weight_gradient_is_deterministic_and_reduced_over_all_rows():
    x = _t((37, 24), F32, 8)  # more rows than programs: each program accumulates several
    w = _t((24,), F32, 1).requires_grad_()
    grads = []
    for _ in range(2):
        w.grad = None
        dispatch.rms_norm(x, [24], w, backend="triton").sum().backward()
        grads.append(w.grad.clone())
    assert torch.equal(grads[0], grads[1])
    expected = (F.rms_norm(x.double(), (24,))).sum(0)
    torch.testing.assert_close(grads[0].double(), expected, rtol=1e-5, atol=1e-5)


def test_frozen_weight_gets_no_gradient_and_input_still_does():
    x = _t((6, 24), F32, 9).requires_grad_()
    w, b = _t((24,), F32, 1), _t((24,), F32, 2).requires_grad_()
    dispatch.layer_norm(x, [24], w, b, backend="triton").sum().backward()
    assert w.grad is None and b.grad is not None
    torch.testing.assert_close(b.grad, torch.full((24,), 6.0, device=DEV))
    x2 = x.detach().clone().requires_grad_()
    F.layer_norm(x2, [24], w, b.detach()).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("why,call", [
    ("float64", lambda: spec_of("rms_norm", torch.ones(2, 8, dtype=torch.float64, device=DEV), (8,))),
    ("differs", lambda: spec_of("rms_norm", torch.ones(2, 8, device=DEV), (8,),
                                torch.ones(8, dtype=BF16, device=DEV))),
    ("must be dense", lambda: spec_of("layer_norm", torch.ones(8, 4, device=DEV).t(), (8,))),
    ("collapse", lambda: spec_of("layer_norm", torch.ones(4, 6, 8, device=DEV)[:, ::2].transpose(0, 1), (8,))),
], ids=["fp64", "mixed-dtype", "transposed", "rows"])
def test_refusals_say_why(why, call):
    spec = call()
    from dispatch_triton import dispatch_check

    verdict = dispatch_check(spec.op, spec)
    assert not verdict.ok and why in verdict.reason, verdict
    with pytest.raises(dispatch.BackendRefusedError, match=why):
        getattr(dispatch, spec.op)(*_call_of(spec), backend="triton")


def _call_of(spec):
    x = torch.empty_strided(spec.shape, spec.stride, dtype=spec.dtype, device=spec.device).fill_(1.0)
    w = spec.tensors[1]
    weight = torch.ones(w.shape, dtype=w.dtype, device=spec.device) if w.present else None
    return (x, list(spec.normalized_shape), weight)


# ---------------------------------------------------------------------------------------------
# Triton's autotuner and compile cache: with and without weight/bias share one entry

def cpu_do_bench(fn, quantiles=None, **_):
    fn()
    return [1.0] * len(quantiles) if quantiles else 1.0


@pytest.fixture
def tuner():
    kernel = N.autotuned(do_bench=cpu_do_bench)
    kernel.cache.clear()
    yield kernel
    kernel.cache.clear()


def test_autotuner_key_is_the_bucket_only(tuner):
    assert tuner.keys == ["N_BUCKET"]
    assert {"HAS_WEIGHT", "HAS_BIAS", "IS_RMS"}.isdisjoint(tuner.keys)


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_autotune_cache_does_not_split_on_weight_or_bias(tuner, op):
    x = _t((4, 40), BF16, 0)
    w, b = _t((40,), BF16, 1), _t((40,), BF16, 2)
    before = None
    for weight, bias in ((None, None), (w, None), (w, b), (None, b)):
        y = N.run_autotuned(op, x, weight, bias if op == "layer_norm" else None, do_bench=cpu_do_bench)
        ref = (F.rms_norm(x.float(), (40,), None if weight is None else weight.float(), 1e-5) if op == "rms_norm"
               else F.layer_norm(x.float(), (40,), None if weight is None else weight.float(),
                                 None if bias is None else bias.float(), 1e-5))
        torch.testing.assert_close(y.float(), ref, **TOL[BF16])
        if before is None and DEV.type == "cuda":  # after the first call tuned (compiling every config)
            before = _compiled_variants(N._norm_fwd)
    if DEV.type == "cuda":  # later calls compile the tuned config once per new HAS_WEIGHT/HAS_BIAS toggle
        assert _compiled_variants(N._norm_fwd) - before <= 3
    N.run_autotuned(op, _t((3, 60), BF16, 3), do_bench=cpu_do_bench)  # 40 and 60: one bucket
    assert len(tuner.cache) == 1, list(tuner.cache)


def test_autotune_cache_negative_control_a_wrong_dtype_standin_splits(tuner):
    x = _t((4, 40), BF16, 0)
    N.run_autotuned("rms_norm", x, do_bench=cpu_do_bench)
    N.run_autotuned("rms_norm", x, torch.ones(40, dtype=F32, device=DEV), do_bench=cpu_do_bench)
    assert len(tuner.cache) == 2  # Triton keys on every tensor's dtype: why absent ones get the input's


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_compiled_variants_do_not_split_on_rows_or_placeholders(op):
    # the JIT's compile cache: one variant per weight/bias toggle, whatever the row count
    n = 1000
    w, b = _t((n,), BF16, 1), _t((n,), BF16, 2)
    combos = [(None, None), (w, None)] if op == "rms_norm" else [(None, None), (w, None), (None, b), (w, b)]

    def call_all(m):
        x = _t((m, n), BF16, m)
        for weight, bias in combos:
            args = (x, [n], weight) if op == "rms_norm" else (x, [n], weight, bias)
            getattr(dispatch, op)(*args, backend="triton")

    before = _compiled_variants(N._norm_fwd)
    call_all(64)
    first = _compiled_variants(N._norm_fwd) - before
    assert first <= len(combos)
    for m in (50, 33, 64):  # other row counts of the bucket, a row count not a multiple of 16
        call_all(m)
    assert _compiled_variants(N._norm_fwd) - before == first


def _compiled_variants(jit_fn) -> int:
    caches = getattr(jit_fn, "device_caches", None)
    if caches is not None:
        return sum(len(entry[0]) for entry in caches.values())
    return sum(len(c) for c in jit_fn.cache.values())


def test_config_space_and_default():
    for n in (1, 40, 1000, 4096, 16384, 65536, 262144):
        for dtype in (BF16, F32):
            space = N.config_space(64, n, dtype)
            assert space and N.default_config(64, n, dtype) == space[0]  # the default wins ties
            assert 2 <= len(space) <= 10 and len({tuple(sorted(c.items())) for c in space}) == len(space)
            assert all(N.one_pass(c, n) == (c["BLOCK_N"] >= N._np2(n)) for c in space)
    assert any(c["SPLIT"] > 1 for c in N.config_space(4, 262144, BF16))  # few long rows: cut over programs
    for m, n in ((4, 262144), (64, 65536), (128, 20000)):  # rows too long for registers: the exchange
        cfg = N.default_config(m, n, BF16)
        assert N.coop(cfg) and -(-n // cfg["BLOCK_N"]) <= 128
    cfg = N.default_config(2, 1 << 20, F32)  # 128 chunks at most: larger ones for the longest rows
    assert N.coop(cfg) and cfg["BLOCK_N"] == 8192
    # 2-byte rows of up to 64K, rows enough to fill the device: a program per row (fp32: the exchange)
    cfg = N.default_config(256, 65536, BF16)
    assert not N.coop(cfg) and cfg["SPLIT"] == 1 and cfg["PREFETCH"] == 1
    assert N.coop(N.default_config(256, 65536, F32)) and N.coop(N.default_config(64, 262144, BF16))


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_cards_order_norm_calls_on_cuda_as_measured(op):
    # as measured on an H200 (benchmarks/results/current/launch/launch_norms*.md): an inference
    # call runs Triton's kernel from decode shapes (wall and device time) to bandwidth shapes; a
    # training call (forward and backward through a Python autograd.Function) costs more host
    # time than torch's, so torch's up to 8192x4096 and Triton's from 16384x4096 (where its
    # smaller device time decides), and on few long rows, where torch's kernel (a row per block)
    # leaves the GPU idle (64x262144: 902 against 248 us a step, launch_norms_grad.md); timed on
    # the device alone (CUDA graphs), Triton's everywhere
    import attrs

    from dispatch import _plugins
    from dispatch._select import by_estimated_cost

    servers = [b for b in _plugins.registry().backends.values() if b.name in ("triton", "torch")]
    cuda = torch.device("cuda", 0)
    for m, n, training_wall in ((1, 4096, "torch"), (32, 4096, "torch"), (1, 8192, "torch"),
                                (4096, 4096, "torch"), (8192, 4096, "torch"), (1024, 16384, "torch"),
                                (16384, 4096, "triton"), (4096, 16384, "triton"), (32768, 4096, "triton"),
                                (256, 65536, "triton"), (64, 262144, "triton")):
        x, w = (torch.empty(shape, device="meta", dtype=torch.bfloat16) for shape in ((m, n), (n,)))
        spec = spec_of(op, x, (n,), w)
        for grad, timing, first in ((False, "wall", "triton"), (True, "wall", training_wall),
                                    (False, "device", "triton"), (True, "device", "triton")):
            tensors = [attrs.evolve(t, device=cuda, requires_grad=grad and t.present) for t in spec.tensors]
            ordered, estimates = by_estimated_cost(servers, attrs.evolve(spec, tensors=tensors), timing)
            assert ordered[0].name == first, (m, n, grad, timing, estimates)


@pytest.mark.skipif(DEV.type != "cuda", reason="programs that wait for each other run on a GPU only")
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("m,n,finish", [(16384, 1024, 64), (4096, 4096, 64), (3000, 1000, 16), (7, 4096, 4),
                                         (1024, 16384, 128), (64, 262144, 512), (5, 65537, 32)])
def test_column_sums_finished_in_the_launch(op, m, n, finish):
    # the last programs to finish sum the partials' columns once every program has written its row
    # (FINISH; rows held in registers, and long rows' one-launch exchange): the same gradients as
    # the separate column-sum launch, the same bits call after call, whatever ran on the stream
    # before (another launch ticketing the same words) and under CUDA-graph replay. 64 x 262144 at
    # 128 registers: 4 row groups of 128 chunks, every one of the 512 programs finishing
    layer = op == "layer_norm"
    regs = dict(maxnreg=128) if finish == 512 else {}
    fused = NB.make_backward(op, m, n, BF16, n, 1e-5, True, layer, plan=dict(FINISH=finish, **regs))
    apart = NB.make_backward(op, m, n, BF16, n, 1e-5, True, layer, plan=dict(FINISH=0))
    other = NB.make_backward("rms_norm", 64, 65536, BF16, 65536, 1e-5, True, False)  # the long rows' exchange
    ox, ody, ow = _t((64, 65536), BF16, 7), _t((64, 65536), BF16, 8), _t((65536,), BF16, 9)
    inputs = [(_t((m, n), BF16, s, 1.0, s), _t((n,), BF16, s + 1, 0.5, 1.0), _t((n,), BF16, s + 2),
               _t((m, n), BF16, s + 3)) for s in (0, 4)]

    def run(bw, x, w, b, dy):
        return bw(dy, x, w, b, None) if layer else bw(dy, x, w, None)

    first = [run(fused, *inp) for inp in inputs]
    for inp, got in zip(inputs, first):
        want = run(apart, *inp)
        assert torch.equal(got[0], want[0])
        for a, b in zip(got[1:], want[1:]):
            scale = b.float().abs().max().clamp_min(1)
            torch.testing.assert_close(a.float() / scale, b.float() / scale, rtol=1e-2, atol=1e-2)
    for _ in range(3):
        for inp, want in zip(inputs, first):
            other(ody, ox, ow, None)
            for a, b in zip(run(fused, *inp), want):
                assert int((a != b).sum()) == 0, f"{op} {m}x{n}: a repeated backward differs"
    stream = torch.cuda.Stream(DEV)
    stream.wait_stream(torch.cuda.current_stream(DEV))
    with torch.cuda.stream(stream):
        run(fused, *inputs[0])
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            captured = run(fused, *inputs[0])
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize(DEV)
        for a, b in zip(captured, first[0]):
            assert int((a != b).sum()) == 0, f"{op} {m}x{n}: a replayed backward differs"


@pytest.mark.skipif(DEV.type != "cuda", reason="the long rows' one launch runs on a GPU only")
def test_rms_norm_fp32_long_rows_lean_plan_repeats_its_bits():
    # rms_norm's fp32 long rows: the default plan (80 registers, three programs a multiprocessor,
    # the column sums finished in the launch) gives the gradients of the 128-register plan with a
    # second launch, and the same bits call after call
    m, n = 64, 262144
    lean = NB.make_backward("rms_norm", m, n, F32, n, 1e-5, True, False)
    wide = NB.make_backward("rms_norm", m, n, F32, n, 1e-5, True, False, plan=dict(maxnreg=128, FINISH=0))
    assert NP.backward_plan(m, n, F32, DEV, op="rms_norm")["maxnreg"] == 80
    x, w, dy = _t((m, n), F32, 31, 1.0, 0.5), _t((n,), F32, 32, 0.5, 1.0), _t((m, n), F32, 33)
    stats = torch.rsqrt(x.double().pow(2).mean(-1) + 1e-5).float()  # as the forward saves them
    first = lean(dy, x, w, None, stats.clone())
    want = wide(dy, x, w, None, stats.clone())
    torch.testing.assert_close(first[0], want[0], rtol=1e-5, atol=1e-5)
    scale = want[1].abs().max()
    torch.testing.assert_close(first[1] / scale, want[1] / scale, rtol=1e-5, atol=1e-5)
    for _ in range(3):
        again = lean(dy, x, w, None, stats.clone())
        assert all(torch.equal(a, b) for a, b in zip(again, first))


@pytest.mark.skipif(DEV.type != "cuda", reason="the long rows' one launch runs on a GPU only")
@pytest.mark.parametrize("frozen", ["weight", "bias"])
def test_long_rows_frozen_parameter_with_the_finish(frozen):
    # long rows' one launch with its column sums finished in it (the default), one of layer_norm's
    # parameters frozen: the other's gradient alone is summed, where dweight's would be
    m, n = 48, 65536
    plan = NP.backward_plan(m, n, BF16, DEV, grads=1)
    assert plan["COOP"] and plan["FINISH"] > 0
    x = _t((m, n), BF16, 21, 1.0, 0.5).requires_grad_()
    w, b = _t((n,), BF16, 22, 0.5, 1.0), _t((n,), BF16, 23)
    w.requires_grad_(frozen != "weight")
    b.requires_grad_(frozen != "bias")
    dy = _t((m, n), BF16, 24)
    dispatch.layer_norm(x, [n], w, b, backend="triton").backward(dy)
    ref = [t.detach().double().requires_grad_(t.requires_grad) for t in (x, w, b)]
    F.layer_norm(ref[0], [n], ref[1], ref[2]).backward(dy.double())
    for got, want in zip((x, w, b), ref):
        if not want.requires_grad:
            assert got.grad is None
            continue
        scale = want.grad.abs().max()
        torch.testing.assert_close(got.grad.double() / scale, want.grad / scale, rtol=2e-2, atol=2e-2)


def test_finish_under_the_interpreter_is_the_last_program_only():
    if not N._interpreting():
        pytest.skip("the interpreter's refusal")
    with pytest.raises(ValueError, match="FINISH=2.*only the last"):
        NB.make_backward("rms_norm", 9, 100, F32, 100, 1e-5, True, False, plan=dict(FINISH=2, G=3))


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("config", [None, dict(BLOCK_N=16, SPLIT=1), dict(BLOCK_N=16, SPLIT=4),
                                    dict(BLOCK_N=16, SPLIT=1, COOP=1)],
                         ids=["default", "chunked", "split4", "coop"])
@pytest.mark.parametrize("absent", [False, True], ids=["wb", "plain"])
def test_a_half_precision_input_with_a_float32_result(op, config, absent):
    # torch.autocast's float32 call of a bfloat16 input, read in the kernel (no float32 copy): the
    # result, the gradients of the input (bfloat16) and of the float32 weight and bias are the cast call's
    m, n = 3, 100
    x = _t((m, n), BF16, 6, 2.0, 5.0).requires_grad_()
    w, b = (None, None) if absent else (_t((n,), F32, 1).requires_grad_(), _t((n,), F32, 2).requires_grad_())
    b = b if op == "layer_norm" else None
    decl = DECLS[op]
    spec = decl.spec(decl.bind(x, [n], w, *((b,) if op == "layer_norm" else ())), out_dtype=F32)
    assert N.check(spec)
    cfg = None if config is None else dispatch.backend.Config.of(dict(ROWS=1, num_warps=1, num_stages=1, **config))
    tensors = (x.detach(), None if w is None else w.detach()) + ((None if b is None else b.detach(),)
                                                                if op == "layer_norm" else ())
    y = N.kernel(spec, cfg)(*tensors)
    leaves = [t for t in (x, w, b) if t is not None]
    ref = (F.rms_norm(x.float(), (n,), w, spec.eps) if op == "rms_norm"
           else F.layer_norm(x.float(), (n,), w, b, spec.eps))
    assert y.dtype == F32
    torch.testing.assert_close(y, ref, **TOL[F32])
    dy = _t((m, n), F32, 7)
    grads = [g for g in N.backward(spec)(dy, *tensors, y) if g is not None]
    want = torch.autograd.grad(ref, leaves, dy)
    assert [g.dtype for g in grads] == [t.dtype for t in leaves]
    for g, r in zip(grads, want):
        torch.testing.assert_close(g.float(), r.float(), **GTOL[BF16 if g.dtype == BF16 else F32])


@pytest.mark.parametrize("m,n", [(256, 65536), (512, 32768)])
def test_many_half_precision_rows_written_as_float32_go_to_the_exchange(m, n):
    # layer_norm's 2-byte rows of up to 64K, many of them: walked twice in chunks (the second read
    # from L2); written as float32 (autocast) the output doubles and the one-launch exchange, which
    # reads a row once, leads (H100, 256 x 65536: 47.2 us against 57.4 for the walk)
    x = torch.empty(m, n, dtype=BF16, device="meta")
    w = torch.empty(n, dtype=F32, device="meta")
    half = LAYER_NORM.spec(LAYER_NORM.bind(x, [n], w.to(BF16), w.to(BF16)))
    widened = LAYER_NORM.spec(LAYER_NORM.bind(x, [n], w, w), out_dtype=F32)
    walk, exchange = N.tune_space(half), N.tune_space(widened)
    assert not walk.default.get("COOP") and exchange.default.get("COOP") == 1, (walk.default, exchange.default)
    assert exchange.default == exchange.configs[0] and walk.default in exchange.configs
    assert N.default_config(m, n, BF16, x.device, "rms_norm", F32) == N.default_config(m, n, BF16, x.device, "rms_norm")
    # the chunk that led each on the H100: 4096 elements past 32K (47.6 us against 51.0 for 2048),
    # 2048 up to it (512 x 32768: 47.9 against 55.0 for 4096)
    assert (exchange.default["BLOCK_N"], exchange.default["num_warps"]) == ((4096, 4) if n > 32768 else (2048, 4))


def test_a_result_dtype_other_than_the_inputs_or_float32_is_refused():
    x, w = _t((2, 8), F32, 1), _t((8,), F32, 2)
    spec = RMS_NORM.spec(RMS_NORM.bind(x, [8], w), out_dtype=BF16)
    assert not N.check(spec) and "float32" in N.check(spec).reason
    half = RMS_NORM.spec(RMS_NORM.bind(x.to(BF16), [8], w.to(BF16)), out_dtype=F32)
    assert "weight dtype bfloat16 differs from the result's (float32)" in N.check(half).reason


@pytest.mark.parametrize("warps", [1, 2, 4, 8, 16, 32])
@pytest.mark.parametrize("maxnreg", [None, 24, 32, 40, 64, 80, 128, 168, 255])
def test_the_backward_counts_no_more_resident_programs_than_a_multiprocessor_holds(warps, maxnreg):
    # the one-launch exchange waits for every program of a row group: counting more programs than an
    # sm_90 multiprocessor holds (65536 registers, in blocks of 256 a warp; 64 warps; 32 programs)
    # would leave some unlaunched while the others wait for them
    resident = NP._resident_per_sm(warps, maxnreg)
    regs = maxnreg or 64
    assert 1 <= resident <= 32 and resident * warps <= 64
    assert resident * warps * -(-regs * 32 // 256) * 256 <= 65536 or resident == 1
