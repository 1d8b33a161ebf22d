"""On a CUDA device: the GPU backends' direct launch, its fallback, and CUDA-graph capture and replay."""

from __future__ import annotations

import json

import pytest
import torch

import dispatch
from dispatch.backend import spec_of
from dispatch.tolerance import mismatch

pytestmark = pytest.mark.gpu

OPS = ["softmax", "log_softmax", "logsumexp"]
# decode rows, a vocabulary row, a bandwidth shape, and long rows (Triton's split paths: several
# programs per row meeting through device-side counters and workspaces)
SHAPES = [(1, 4096), (32, 4096), (8, 32000), (4, 262144)]


def gpu_backends():
    if not torch.cuda.is_available():
        return ["triton", "tilelang", "torch"]
    return [n for n, info in dispatch.backends().items() if info.available]


@pytest.fixture(params=gpu_backends())
def backend(request):
    info = dispatch.backends().get(request.param)
    if info is None or not info.available:
        pytest.skip(f"backend {request.param} not available: {info.available.reason if info else 'not loaded'}")
    return request.param


def _x(shape, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, device="cuda", generator=g) * 4).to(dtype)


def _warm(fn, calls=3):
    """Calls on a side stream before capture, as torch's CUDA-graph docs ask."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(calls):
            fn()
    torch.cuda.current_stream().wait_stream(side)


def _capture(fn):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_captured_call_replays_with_correct_results_on_new_inputs(backend, op, shape):
    x = _x(shape)
    fn = lambda: getattr(dispatch, op)(x, -1, backend=backend)  # noqa: E731
    _warm(fn)
    graph, out = _capture(fn)
    for seed in (1, 2):  # a replay reads what the static input holds now
        x.copy_(_x(shape, seed=seed))
        graph.replay()
        torch.cuda.synchronize()
        assert mismatch(out, getattr(torch, op)(x, -1)) is None, seed


def _capture_case(op, shape, backend):
    """(call, reference) for a norm call (weight and bias) or a softmax over a non-last dim."""
    import torch.nn.functional as F

    x = _x(shape)
    if op in ("rms_norm", "layer_norm"):
        n = shape[-1]
        w, b = _x((n,), seed=5), _x((n,), seed=6)
        args = (x, (n,), w) if op == "rms_norm" else (x, (n,), w, b)
        return x, (lambda: getattr(dispatch, op)(*args, backend=backend)), (lambda: getattr(F, op)(*args))
    return x, (lambda: getattr(dispatch, op)(x, 0, backend=backend)), (lambda: getattr(torch, op)(x, 0))


@pytest.mark.parametrize("op,shape", [("rms_norm", (8, 4096)), ("layer_norm", (8, 4096)), ("rms_norm", (2, 65536)),
                                      ("layer_norm", (3, 262144)), ("softmax", (512, 256)), ("logsumexp", (4096, 64))],
                         ids=str)
def test_captured_norms_and_non_last_dims_replay_with_correct_results(backend, op, shape):
    x, fn, ref = _capture_case(op, shape, backend)
    try:
        fn()
    except dispatch.BackendRefusedError as exc:
        pytest.skip(f"{backend} does not serve it: {exc}")
    _warm(fn)
    graph, out = _capture(fn)
    for seed in (1, 2):
        x.copy_(_x(shape, seed=seed))
        graph.replay()
        torch.cuda.synchronize()
        assert mismatch(out, ref()) is None, seed


def _replays_beside_eager_calls(ours, theirs, shape):
    """Two graphs of ``ours`` (on inputs of seeds 1 and 2) replayed at once on two streams while
    eager calls of ``ours`` (seed 3) run on a third, five rounds: each result matches ``theirs``
    of its own input."""
    xs = [_x(shape, seed=s) for s in (1, 2)]
    graphs = []
    for x in xs:
        fn = lambda x=x: ours(x)  # noqa: E731
        _warm(fn)
        graphs.append(_capture(fn))
    eager_x = _x(shape, seed=3)
    streams = [torch.cuda.Stream() for _ in range(3)]
    eager_outs = []
    for _ in range(5):
        # every stream waits for the work that made its inputs (eager_x is written on the current
        # stream): without the wait, the eager call may read eager_x before it is written
        for stream in streams:
            stream.wait_stream(torch.cuda.current_stream())
        for stream, (graph, _) in zip(streams, graphs):
            with torch.cuda.stream(stream):
                graph.replay()
        with torch.cuda.stream(streams[2]):
            eager_outs.append(ours(eager_x))
    torch.cuda.synchronize()
    for x, (_, out) in zip(xs, graphs):
        assert mismatch(out, theirs(x)) is None
    want = theirs(eager_x)
    for got in eager_outs:
        assert mismatch(got, want) is None


@pytest.mark.parametrize("op", OPS)
def test_concurrent_replays_and_eager_calls_do_not_corrupt_each_other(backend, op):
    """The split path (rows over several programs): two graphs and eager calls of one spec at once."""
    _replays_beside_eager_calls(lambda x: getattr(dispatch, op)(x, -1, backend=backend),
                                lambda x: getattr(torch, op)(x, -1), (4, 262144))


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_concurrent_replays_of_long_row_norms_do_not_corrupt_each_other(backend, op):
    """Rows too long for one program (Triton: groups of programs exchange partial sums): two graphs
    and eager calls of one spec at once."""
    import torch.nn.functional as F

    shape, n = (3, 262144), 262144
    w, b = _x((n,), seed=5), _x((n,), seed=6)

    def call(fn, x):
        return fn(x, (n,), w) if op == "rms_norm" else fn(x, (n,), w, b)

    ours = lambda x: call(lambda *a: getattr(dispatch, op)(*a, backend=backend), x)  # noqa: E731
    try:
        ours(_x(shape))
    except dispatch.BackendRefusedError as exc:
        pytest.skip(f"{backend} does not serve it: {exc}")
    _replays_beside_eager_calls(ours, lambda x: call(getattr(F, op), x), shape)


def _kernel(backend_module, op, x):
    return backend_module.dispatch_kernel(op=op, spec=spec_of(op, x, -1), config=None)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", [(1, 4096), (32, 4096), (4, 262144)], ids=str)
def test_triton_arms_the_direct_launch_and_a_misaligned_view_takes_the_jit_path(op, shape):
    dispatch_triton = pytest.importorskip("dispatch_triton")
    if not dispatch.backends()["triton"].available:
        pytest.skip("triton backend unavailable")
    m, n = shape
    base = _x(m * n + 8)
    aligned = base[: m * n].view(m, n)
    run = _kernel(dispatch_triton, op, aligned)
    for _ in range(2):
        assert mismatch(run(aligned), getattr(torch, op)(aligned, -1)) is None
    states = {d.state for d in run.launcher.direct}
    assert states == {"direct"}, [d.why for d in run.launcher.direct]
    misaligned = base[1: 1 + m * n].view(m, n)  # same shape, strides and dtype, 2 bytes off
    assert misaligned.data_ptr() % 16
    before = misaligned.clone()
    got = run(misaligned)
    assert mismatch(got, getattr(torch, op)(misaligned, -1)) is None
    assert torch.equal(misaligned, before)
    assert mismatch(run(aligned), getattr(torch, op)(aligned, -1)) is None  # and back on the direct path


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_norms_on_misaligned_views_match_torch_forward_and_backward_and_leave_them_alone(backend, op):
    # the norm kernels load 16-byte vectors; input, weight, bias and the incoming gradient are
    # views that start 2 bytes past an aligned address
    import torch.nn.functional as F

    if backend not in dispatch.backends() or not dispatch.backends()[backend].available:
        pytest.skip(f"{backend} backend unavailable")
    m, n = 8, 4096

    def misaligned(numel, shape, seed):
        view = _x(numel + 8, seed=seed)[1:1 + numel].view(shape)
        assert view.data_ptr() % 16
        return view

    x, gy = misaligned(m * n, (m, n), 1), misaligned(m * n, (m, n), 4)
    w, b = misaligned(n, (n,), 2), misaligned(n, (n,), 3)
    before = [t.clone() for t in (x, w, b, gy)]
    leaves = [t.detach().requires_grad_() for t in ((x, w) if op == "rms_norm" else (x, w, b))]
    y = getattr(dispatch, op)(leaves[0], (n,), *leaves[1:], backend=backend)
    grads = torch.autograd.grad(y, leaves, gy)
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    ref = getattr(F, op)(ref_leaves[0], (n,), *ref_leaves[1:])
    ref_grads = torch.autograd.grad(ref, ref_leaves, gy.double())
    torch.testing.assert_close(y.double(), ref, rtol=2e-2, atol=3e-2)
    for got, want in zip(grads, ref_grads):
        scale = want.abs().max().clamp_min(1)
        torch.testing.assert_close(got.double() / scale, want / scale, rtol=5e-2, atol=5e-2)
    assert all(torch.equal(t, u) for t, u in zip((x, w, b, gy), before))


@pytest.mark.parametrize("op", OPS)
def test_tilelang_arms_the_executable_call_and_copes_with_a_misaligned_view(op):
    dispatch_tilelang = pytest.importorskip("dispatch_tilelang")
    if not dispatch.backends()["tilelang"].available:
        pytest.skip("tilelang backend unavailable")
    m, n = 32, 4096
    base = _x(m * n + 8)
    aligned = base[: m * n].view(m, n)
    run = _kernel(dispatch_tilelang, op, aligned)
    for _ in range(2):
        assert mismatch(run(aligned), getattr(torch, op)(aligned, -1)) is None
    assert run.path.state == "direct", run.path.why
    misaligned = base[1: 1 + m * n].view(m, n)
    before = misaligned.clone()
    assert mismatch(run(misaligned), getattr(torch, op)(misaligned, -1)) is None
    assert torch.equal(misaligned, before)


def test_launch_benchmark_runs_and_writes_its_table(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_launch.py"
    proc = subprocess.run([sys.executable, str(script), "--shapes", "1x4096", "--no-compile", "--device-timing",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = (tmp_path / "launch.md").read_text()
    assert "dispatch[triton]" in table or "triton" not in dispatch.backends()
    assert "dispatch (pick, device timing)" in table and "WRONG" not in table, table
    # the norms with their weight and bias, as training calls: every contender's input gradient
    # matches torch's (a wrong one is marked WRONG after a graph replay, or reported as an error)
    proc = subprocess.run([sys.executable, str(script), "--shapes", "8x512", "--ops", "rms_norm,layer_norm", "--grad",
                           "--rounds", "3", "--no-compile", "--out", str(tmp_path / "grad")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = (tmp_path / "grad" / "launch.md").read_text()
    assert "layer_norm (forward + backward)" in table and "WRONG" not in table, table
    assert "wrong eager result" not in proc.stdout, proc.stdout[-2000:]
    # inside one autocast region, as a mixed-precision model calls them: results match torch's
    proc = subprocess.run([sys.executable, str(script), "--shapes", "8x512", "--ops", "softmax,layer_norm",
                           "--autocast", "--rounds", "3", "--no-compile", "--out", str(tmp_path / "autocast")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = (tmp_path / "autocast" / "launch.md").read_text()
    assert "layer_norm (autocast)" in table and "WRONG" not in table, table
    rows = json.loads((tmp_path / "autocast" / "launch.json").read_text())["rows"]
    assert all(not row["errors"] for row in rows), [row["errors"] for row in rows]
    # logsumexp over several dims of a 3-D input, eager and as a training call: torch's results
    for extra, folder in (([], "lse"), (["--grad"], "lse_grad")):
        proc = subprocess.run([sys.executable, str(script), "--shapes", "16x8x32", "--ops", "logsumexp",
                               "--dim", "0,2", "--rounds", "3", "--no-compile", "--out", str(tmp_path / folder),
                               *extra], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        table = (tmp_path / folder / "launch.md").read_text()
        assert "16x8x32, dim (0, 2)" in table and "WRONG" not in table, table
        assert "wrong eager result" not in proc.stdout, proc.stdout[-2000:]


def test_a_key_met_first_during_capture_is_neither_tuned_nor_checked_and_explain_says_so():
    dispatch.configure(autotune=True)
    x = _x((24, 3000))  # a key no other test resolves
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = dispatch.softmax(x, -1)
    graph.replay()
    torch.cuda.synchronize()
    assert mismatch(y, torch.softmax(x, -1)) is None
    explained = dispatch.explain("softmax", x, -1)
    assert "met first during CUDA-graph capture" in explained.decision.reason
    assert explained.decision.tune is None
    eager = dispatch.softmax(x, -1)  # resolved and checked now, eagerly
    assert mismatch(eager, torch.softmax(x, -1)) is None
    assert "met first during CUDA-graph capture" not in dispatch.explain("softmax", x, -1).decision.reason


@pytest.mark.parametrize("op", OPS)
def test_a_device_timing_block_warms_up_captures_and_replays_its_own_pick(op):
    """``use(timing="device")`` around the warm-up and the capture: the block's key is decided by
    device time, its graph replays torch's results on new inputs, and outside the block the same
    call keeps its own (wall-time) resolution."""
    x = _x((1, 32768), seed=7)
    fn = lambda: getattr(dispatch, op)(x, -1)  # noqa: E731
    with dispatch.use(timing="device"):
        _warm(fn)
        inside = dispatch.explain(op, x, -1)
        graph, out = _capture(fn)
    assert "timing: device" in str(inside) and inside.hot
    for seed in (8, 9):
        x.copy_(_x((1, 32768), seed=seed))
        graph.replay()
        torch.cuda.synchronize()
        assert mismatch(out, getattr(torch, op)(x, -1)) is None
    outside = dispatch.explain(op, x, -1)
    assert "timing: wall" in str(outside) and not outside.hot  # not resolved outside the block yet
    assert mismatch(fn(), getattr(torch, op)(x, -1)) is None


REDUCE_OVERHEAD_CASES = [(op, (32, 4096)) for op in OPS + ["rms_norm", "layer_norm"]] + [
    ("softmax", (4, 262144)), ("rms_norm", (4, 262144))]  # long rows: the split and cooperative paths' buffers


@pytest.mark.parametrize("op, shape", REDUCE_OVERHEAD_CASES, ids=str)
def test_under_torch_compile_reduce_overhead_replays_give_correct_results_on_new_inputs(backend, op, shape):
    """cudagraph trees warm a graph up with the thread's allocations going to the graph's pool, which
    must then hold only the graph's outputs: buffers a backend keeps across calls must come from
    elsewhere (``lasting_zeros``)."""
    torch._dynamo.reset()
    n = shape[-1]
    w, b = _x((n,), seed=9), _x((n,), seed=10)
    rest = {"rms_norm": ([n], w), "layer_norm": ([n], w, b)}.get(op, (-1,))
    ours = getattr(dispatch, op)
    theirs = getattr(torch.nn.functional if op in ("rms_norm", "layer_norm") else torch, op)
    try:  # decided without running anything (a first eager call would allocate the kept buffers)
        dispatch.explain(op, _x(shape), *rest, backend=backend)
    except dispatch.BackendRefusedError as exc:
        pytest.skip(f"{backend} does not serve it: {exc}")
    compiled = torch.compile(lambda x: ours(x, *rest, backend=backend) * 2, mode="reduce-overhead",
                             fullgraph=True, dynamic=False)
    for seed in range(4):  # the first calls warm up and record, the later ones replay the CUDA graph
        x = _x(shape, seed=seed)
        assert mismatch(compiled(x).clone(), theirs(x, *rest) * 2) is None, seed


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("dtype,shape", [(torch.bfloat16, (1024, 65536)), (torch.float32, (256, 65536)),
                                         (torch.bfloat16, (3, 50257)), (torch.bfloat16, (64, 262144))], ids=str)
def test_triton_staged_chunks_match_torch_eager_and_under_graph_replay(stages, dtype, shape):
    # logsumexp's chunks with their next chunks pipelined through shared memory: whole-chunk rows,
    # an odd vocabulary length (off the 16-byte grid: plain loads), -inf over more than a chunk;
    # launched twice (the rows' counters reset), then captured and replayed on new values
    pytest.importorskip("dispatch_triton")
    if not dispatch.backends()["triton"].available:
        pytest.skip("triton backend unavailable")
    from dispatch_triton import configs, launch

    m, n = shape
    x = _x(shape, dtype, seed=5)
    x[0, :9000] = -float("inf")
    x[m - 1, n - 1] = 60.0
    before = x.clone()
    space = [c for c in configs.config_space("logsumexp", m, n, dtype) if c["path"] == "chunks"]
    assert space
    for cfg in (dict(c, num_stages=stages) for c in space):
        out, run = launch.prepare("logsumexp", x, dtype, cfg)
        for _ in range(2):
            out.fill_(float("nan"))
            run()
            assert mismatch(out, torch.logsumexp(x, -1)) is None, cfg
        assert torch.equal(x, before)  # the input is only read
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            run()
        x.copy_(_x(shape, dtype, seed=6))
        graph.replay()
        torch.cuda.synchronize()
        assert mismatch(out, torch.logsumexp(x, -1)) is None, cfg
        x.copy_(before)


@pytest.mark.parametrize("op,cfg", [("softmax", dict(path="split", warps=4, caps=(64, 72))),
                                    ("log_softmax", dict(path="split_pipe", warps=4, caps=(96,))),
                                    ("logsumexp", dict(path="chunks", warps=2, caps=(80, 96)))], ids=str)
@pytest.mark.parametrize("shape", [(1024, 65536), (6, 131072), (5, 50257)], ids=str)
def test_triton_register_capped_configs_match_torch_and_fill_the_sms_they_say(op, cfg, shape):
    # under maxnreg the kernel spills a few values to the stack and more programs fit an SM: the
    # grid (sized from the capped kernel) must still hold every row's programs at once, and the
    # values stay torch's; bf16, an odd vocabulary length among them (off the 16-byte grid)
    pytest.importorskip("dispatch_triton")
    if not dispatch.backends()["triton"].available:
        pytest.skip("triton backend unavailable")
    from dispatch_triton import configs, launch

    x = _x(shape, torch.bfloat16, seed=7)
    x[0, :5000] = -float("inf")
    ref = getattr(torch, op)(x, -1)
    base = configs._with_fast_exp(configs._cfg(cfg["path"], 4096, 1, 1, cfg["warps"]))
    grids = {}
    for reg in (0,) + cfg["caps"]:
        c = dict(base, maxnreg=reg)
        out, run = launch.prepare(op, x, torch.bfloat16, c)
        run()
        assert mismatch(out, ref) is None, c
        grids[reg] = launch.Launcher(op, *shape, x.dtype, x.dtype, x.stride(0), x.device, c).grid[0]
    if shape[0] >= 1024:  # rows enough to fill the GPU: a lower cap never fits fewer programs
        assert grids[min(cfg["caps"])] >= grids[0], grids
