"""torch.compile: each op is one opaque node (no graph break, fullgraph works), compiled calls match
eager forward and backward with dynamic shapes, and dispatch's settings hold inside compiled code."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import dispatch

import chunked_backend
from op_packages import op_package

torch._dynamo.config.cache_size_limit = 64

CALLS = {
    "softmax": lambda t: dispatch.softmax(t, -1),
    "log_softmax": lambda t: dispatch.log_softmax(t, 0, dtype=torch.float64),
    "logsumexp": lambda t: dispatch.logsumexp(t, [0, 1], keepdim=True),
}
TORCH = {
    "softmax": lambda t: torch.softmax(t, -1),
    "log_softmax": lambda t: torch.log_softmax(t, 0, dtype=torch.float64),
    "logsumexp": lambda t: torch.logsumexp(t, [0, 1], keepdim=True),
}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("op", list(CALLS))
def test_each_op_traces_without_a_graph_break(op):
    explained = torch._dynamo.explain(lambda t: CALLS[op](t) * 2)(torch.randn(4, 8))
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    graph = explained.graphs[0].code
    assert f"dispatch.{op}" in graph or f"dispatch_{op}" in graph, graph


@pytest.mark.parametrize("op", list(CALLS))
def test_fullgraph_matches_eager_forward_and_backward_with_dynamic_shapes(op):
    from torch._dynamo.testing import CompileCounterWithBackend

    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(lambda t: CALLS[op](t).sum() * 2, backend=counter, fullgraph=True, dynamic=True)
    for shape in [(4, 8), (5, 9), (7, 3)]:
        x = torch.randn(*shape, requires_grad=True)
        xr = x.detach().clone().requires_grad_(True)
        out = compiled(x)
        ref = TORCH[op](xr).sum() * 2
        torch.testing.assert_close(out, ref)
        out.backward()
        ref.backward()
        torch.testing.assert_close(x.grad, xr.grad)
    assert counter.frame_count == 1  # one compile serves every shape


def test_numpys_axis_and_keepdims_compile_in_a_fullgraph_as_in_eager():
    def f(t):
        return (dispatch.softmax(t, axis=0) + dispatch.log_softmax(t, axis=0)
                + dispatch.logsumexp(t, axis=1, keepdims=True) + dispatch.logsumexp(t, 1, keepdims=True))

    explained = torch._dynamo.explain(f)(torch.randn(4, 8))
    assert explained.graph_break_count == 0
    x = torch.randn(4, 8)
    want = torch.softmax(x, 0) + torch.log_softmax(x, 0) + 2 * torch.logsumexp(x, 1, keepdim=True)
    torch.testing.assert_close(torch.compile(f, backend="aot_eager", fullgraph=True)(x), want)


def test_a_numpy_integer_dim_compiles_in_a_fullgraph_as_torchs_op_does():
    import numpy as np

    x = torch.randn(3, 4)
    f = torch.compile(lambda t: dispatch.softmax(t, np.int64(0)) + dispatch.logsumexp(t, np.int32(1), keepdim=True),
                      backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(f(x), torch.softmax(x, 0) + torch.logsumexp(x, 1, keepdim=True))


def test_inductor_compiles_a_function_around_the_op():
    compiled = torch.compile(lambda t: dispatch.softmax(t * 3, -1) + 1, fullgraph=True)
    x = torch.randn(6, 10)
    torch.testing.assert_close(compiled(x), torch.softmax(x * 3, -1) + 1)


def test_backend_argument_and_use_blocks_are_honoured_at_run_time():
    calls: list = []
    dispatch.register(chunked_backend.make("chunked", priority=-100, calls=calls))
    forced = torch.compile(lambda t: dispatch.softmax(t, -1, backend="chunked"), fullgraph=True, backend="aot_eager")
    chosen = torch.compile(lambda t: dispatch.log_softmax(t, -1), fullgraph=True, backend="aot_eager")
    x = torch.randn(4, 8)
    torch.testing.assert_close(forced(x), torch.softmax(x, -1))
    assert calls.count("softmax") >= 1
    chosen(x)
    assert "log_softmax" not in calls  # the default choice: torch on the CPU
    with dispatch.use("chunked"):
        torch.testing.assert_close(chosen(x), torch.log_softmax(x, -1))
    assert "log_softmax" in calls
    refused = torch.compile(lambda t: dispatch.softmax(t, -1, backend="chunked"), fullgraph=True, backend="aot_eager")
    with pytest.raises(dispatch.BackendRefusedError, match="chunked"):
        refused(torch.randn(4, 8, dtype=torch.float16))


def test_torch_export_of_a_module_calling_dispatch_ops():
    class Model(torch.nn.Module):
        def forward(self, x):
            return dispatch.logsumexp(dispatch.log_softmax(x, -1), 1)

    x = torch.randn(4, 8)
    exported = torch.export.export(Model(), (x,))
    assert any("dispatch.log_softmax" in str(n.target) for n in exported.graph.nodes)
    torch.testing.assert_close(exported.module()(x), torch.logsumexp(torch.log_softmax(x, -1), 1))


def test_a_third_party_op_compiles_from_its_declaration():
    sys.path.insert(0, str(Path(__file__).parent / "op_package"))
    try:
        from dispatch_rowsum import chunked, op
    finally:
        sys.path.pop(0)
    dispatch.register(op, name="rowsum_ops_local")
    dispatch.register(chunked, name="rowsum_chunked")
    try:
        compiled = torch.compile(lambda t, m: dispatch.masked_rowsum(t, m) + dispatch.masked_rowsum(t, None),
                                 fullgraph=True, backend="aot_eager")
        x = torch.randn(4, 40)
        mask = torch.randint(0, 2, (4, 40), dtype=torch.int8)
        torch.testing.assert_close(compiled(x, mask), (x * mask).sum(-1) + x.sum(-1))
    finally:
        dispatch.unregister("rowsum_chunked")
        dispatch.unregister("rowsum_ops_local")


def test_an_op_declared_anew_under_its_name_compiles_again():
    # unregister (or refresh) and register a package again: a new OpDecl and op function under the
    # old name; its calls still go into the graph as the op's custom op, not traced as Python
    from dispatch.backend import OpDecl, TensorArg

    def declare(scale):
        return OpDecl(name="scaled_sums", parse=lambda input: {}, tensors=(TensorArg("input"),),
                      reference=lambda spec: lambda input: input.sum(-1) * scale,
                      output=lambda spec: (spec.shape[:-1], spec.dtype))

    x = torch.randn(3, 8)
    for scale in (1.0, 2.0):
        torch._dynamo.reset()
        dispatch.register(op_package(declare(scale)), name="scaled_sums_ops")
        try:
            compiled = torch.compile(lambda t: dispatch.scaled_sums(t) + 1, fullgraph=True, backend="aot_eager")
            torch.testing.assert_close(compiled(x), x.sum(-1) * scale + 1)
        finally:
            dispatch.unregister("scaled_sums_ops")


def test_an_op_whose_arguments_are_all_tensors_compiles_and_exports():
    # no attribute besides the tensors (the guide's masked_mean is one): its custom op's kernel
    # decodes the backend alone
    from dispatch.backend import OpDecl, TensorArg

    decl = OpDecl(name="scaled_rows", parse=lambda input, other: {},
                  tensors=(TensorArg("input"), TensorArg("other")),
                  reference=lambda spec: lambda input, other: input * other.sum(-1, keepdim=True),
                  output=lambda spec: (spec.shape, spec.dtype))

    dispatch.register(op_package(decl), name="scaled_rows_ops")
    try:
        x, y = torch.randn(4, 8, requires_grad=True), torch.randn(4, 8)
        compiled = torch.compile(lambda a, b: dispatch.scaled_rows(a, b), fullgraph=True, backend="aot_eager")
        got = compiled(x, y)
        torch.testing.assert_close(got, x * y.sum(-1, keepdim=True))
        got.sum().backward()
        torch.testing.assert_close(x.grad, y.sum(-1, keepdim=True).expand(4, 8))

        class M(torch.nn.Module):
            def forward(self, a, b):
                return dispatch.scaled_rows(a, b)

        exported = torch.export.export(M(), (x.detach(), y))
        torch.testing.assert_close(exported.module()(x.detach(), y), x.detach() * y.sum(-1, keepdim=True))
    finally:
        dispatch.unregister("scaled_rows_ops")


def test_an_op_named_like_a_compiled_backward_is_refused_and_compile_keeps_working():
    # dispatch::softmax_backward is softmax's compiled backward: an op of that name clashed with
    # it when torch.compile registered the ops, and broke every compile in the process
    from dispatch.backend import OpDecl, TensorArg

    with pytest.raises(ValueError, match="must not end in '_backward'"):
        OpDecl(name="softmax_backward", parse=lambda grad_output, output: {},
               tensors=(TensorArg("grad_output"), TensorArg("output")),
               reference=lambda spec: lambda grad_output, output: grad_output * output,
               output=lambda spec: (spec.shape, spec.dtype))
    x = torch.randn(4, 8)
    compiled = torch.compile(lambda t: dispatch.softmax(t, -1), fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), torch.softmax(x, -1))


def test_a_compiled_backward_of_an_input_the_output_does_not_read_is_zero():
    # eager autograd through the reference gives that input no gradient (None); the compiled
    # backward node gives zeros, not an error
    from dispatch.backend import OpDecl, TensorArg

    decl = OpDecl(name="first_twice", parse=lambda input, other: {},
                  tensors=(TensorArg("input"), TensorArg("other")),
                  reference=lambda spec: lambda input, other: input * 2,
                  output=lambda spec: (spec.shape, spec.dtype))

    dispatch.register(op_package(decl), name="first_twice_ops")
    try:
        x, y = torch.randn(3, 4, requires_grad=True), torch.randn(3, 4, requires_grad=True)
        compiled = torch.compile(lambda a, b: dispatch.first_twice(a, b), fullgraph=True, backend="aot_eager")
        compiled(x, y).sum().backward()
        torch.testing.assert_close(x.grad, torch.full((3, 4), 2.0))
        assert y.grad is None or not y.grad.any()
    finally:
        dispatch.unregister("first_twice_ops")


def test_norms_compile_with_weight_and_bias_gradients():
    f = torch.compile(lambda t, w, b: dispatch.layer_norm(t, (16,), w, b).sum() + dispatch.rms_norm(t, [16], w).sum(),
                      fullgraph=True, backend="aot_eager")
    x, w, b = torch.randn(4, 8, 16, requires_grad=True), torch.randn(16, requires_grad=True), torch.randn(16)
    out = f(x, w, b)
    out.backward()
    xr, wr = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
    F = torch.nn.functional
    ref = F.layer_norm(xr, (16,), wr, b).sum() + F.rms_norm(xr, [16], wr).sum()
    ref.backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(x.grad, xr.grad)
    torch.testing.assert_close(w.grad, wr.grad)


def test_dispatch_imported_after_dynamo_is_registered_at_once(tmp_path):
    import subprocess
    import sys

    script = ("import torch, torch._dynamo\nimport dispatch\n"
              "f = torch.compile(lambda t: dispatch.softmax(t, -1) * 2, fullgraph=True, backend='aot_eager')\n"
              "x = torch.randn(3, 5)\nassert torch.allclose(f(x), torch.softmax(x, -1) * 2)\nprint('ok')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_the_custom_op_called_outside_a_graph_runs_like_eager_and_defers_to_modes_and_autograd():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode

    from dispatch._compile import encode
    from dispatch._dispatcher import DISPATCHER

    op = torch.ops.dispatch.softmax.default
    args = encode({"dim": -1, "dtype": None, "backend": None})
    x = torch.randn(4, 8)
    torch.testing.assert_close(op(x, args), torch.softmax(x, -1))
    assert DISPATCHER.function("softmax").key(x, -1, None) in DISPATCHER.tables["softmax"]  # the eager table

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    with Seen() as seen:
        op(x, args)
    assert seen.ops == ["dispatch.softmax.default"]  # one node, as a tracer sees it
    with FakeTensorMode() as mode:
        fake = op(mode.from_tensor(torch.randn(3, 5)), args)
    assert type(fake).__name__ == "FakeTensor" and fake.shape == (3, 5)
    xg, xr = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    (op(xg, args) * torch.arange(8.0)).sum().backward()
    (torch.softmax(xr, -1) * torch.arange(8.0)).sum().backward()
    torch.testing.assert_close(xg.grad, xr.grad)


def test_inductor_passes_views_in_and_writes_the_epilogue_into_the_ops_output():
    """What Inductor generates around the custom op: the op takes the graph input (a transposed view
    of it here) as it is, with no copy, clone or contiguous call, and the pointwise op after it works
    in place on the op's output, so the compiled graph allocates nothing of its own."""
    from torch._inductor.utils import run_and_get_code

    compiled = torch.compile(lambda t: dispatch.softmax(t.t(), -1) * 2, fullgraph=True)
    x = torch.randn(48, 32)
    with torch._inductor.config.patch(fx_graph_cache=False):  # this code, not a cached one
        out, (code, *_) = run_and_get_code(compiled, x)
    torch.testing.assert_close(out, torch.softmax(x.t(), -1) * 2)
    call = code[code.index("def call("):]
    call = call[:call.index("return (")]
    assert call.count("torch.ops.dispatch.softmax.default(reinterpret_tensor(arg0_1,") == 1, call
    for extra in ("empty_strided", "clone", "copy", "contiguous", "as_strided"):
        assert extra not in call, (extra, call)


LAYOUTS = {
    "contiguous": lambda: torch.randn(6, 40),
    "transposed": lambda: torch.randn(40, 6).t(),
    "rows strided": lambda: torch.randn(12, 40)[::2],
    "column slice": lambda: torch.randn(6, 64)[:, :40],
    "every other column": lambda: torch.randn(6, 80)[:, ::2],
}
OP_CALLS = {
    "softmax": (lambda x: (x,), {"dim": -1, "dtype": None}),
    "softmax dim 0": (lambda x: (x,), {"dim": 0, "dtype": None}),
    "log_softmax": (lambda x: (x,), {"dim": -1, "dtype": torch.float32}),
    "logsumexp": (lambda x: (x,), {"dim": [-1], "keepdim": True}),
    "rms_norm": (lambda x: (x, torch.randn(40, dtype=x.dtype)), {"normalized_shape": [40], "eps": None}),
    "layer_norm": (lambda x: (x, torch.randn(40, dtype=x.dtype), torch.randn(40, dtype=x.dtype)),
                   {"normalized_shape": [40], "eps": 1e-5}),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_fake_output_has_the_shape_strides_and_dtype_of_the_real_one(layout):
    """Inductor lays out the graph from the fake implementation and asserts the real output's size
    and strides: a disagreement would fail compiled calls, or cost copies. Checked for every backend
    that serves the call here, float32 and bfloat16."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from dispatch._compile import encode

    backends = [None] + [n for n, i in dispatch.backends().items() if i.available]
    checked = 0
    for call, (tensors_of, values) in OP_CALLS.items():
        op = getattr(torch.ops.dispatch, call.split()[0]).default
        for dtype in (torch.float32, torch.bfloat16):
            tensors = tensors_of(LAYOUTS[layout]().to(dtype))
            for backend in backends:
                args = encode({**values, "backend": backend})
                try:
                    real = op(*tensors, args)
                except dispatch.BackendRefusedError:
                    continue
                with FakeTensorMode() as mode:
                    fake = op(*(mode.from_tensor(t) for t in tensors), args)
                assert (fake.shape, fake.stride(), fake.dtype) == (real.shape, real.stride(), real.dtype), \
                    (call, dtype, backend)
                checked += 1
    assert checked >= 2 * len(OP_CALLS)


def test_a_compiled_backward_runs_the_backward_the_eager_call_gets():
    # a backend with its own backward kernel: a compiled training step's backward node runs it, as
    # the eager call's autograd does, and only for the gradients that are wanted
    from dispatch.backend import CallSpec

    plugin, seen = chunked_backend.make("chunked", priority=200), []

    def dispatch_backward(op: str, spec: CallSpec):
        wanted = [t.name for t in spec.tensors if t.requires_grad]

        def backward(grad, x, y):
            seen.append((op, wanted))
            return y * (grad - (grad * y).sum(-1, keepdim=True))  # softmax's gradient
        return backward if op == "softmax" else None

    plugin.dispatch_backward = dispatch.hookimpl(specname="dispatch_backward")(dispatch_backward)
    dispatch.register(plugin)
    dispatch.configure(allow=["torch", "chunked"])
    f = torch.compile(lambda t: (dispatch.softmax(t, -1, backend="chunked") * 3).sum(), fullgraph=True,
                      backend="aot_eager")
    x = torch.randn(6, 10, requires_grad=True)
    f(x).backward()
    assert seen == [("softmax", ["input"])]
    xr = x.detach().clone().requires_grad_(True)
    (torch.softmax(xr, -1) * 3).sum().backward()
    torch.testing.assert_close(x.grad, xr.grad)
    seen.clear()
    x.grad = None
    (dispatch.softmax(x, -1, backend="chunked") * 3).sum().backward()  # eager: the same backward
    assert seen == [("softmax", ["input"])]
    torch.testing.assert_close(x.grad, xr.grad)


def test_a_compiled_training_step_keeps_the_triton_norm_backward():
    # forced to Triton (on the GPU, or its interpreter on the CPU): the compiled backward runs
    # Triton's own norm backward kernel, weight gradient included, and matches torch's
    pytest.importorskip("triton")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    from dispatch_triton import norm_backward as triton_norms

    built = []
    make = triton_norms.make_backward

    def counting(*args, **kwargs):
        built.append(args[0])
        return make(*args, **kwargs)

    triton_norms.make_backward = counting
    try:
        f = torch.compile(lambda t, w: dispatch.rms_norm(t, (32,), w, backend="triton").square().sum(),
                          fullgraph=True, backend="aot_eager")
        x = torch.randn(5, 32, device=dev, requires_grad=True)
        w = torch.randn(32, device=dev, requires_grad=True)
        f(x, w).backward()
    finally:
        triton_norms.make_backward = make
    assert built == ["rms_norm"]
    xr, wr = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
    torch.nn.functional.rms_norm(xr, (32,), wr).square().sum().backward()
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(w.grad, wr.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape_of", [lambda x: x.shape[-1:], lambda x: [x.shape[-1]], lambda x: (x.shape[-1],)],
                         ids=["torch.Size", "list", "tuple"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_normalized_shape_read_from_the_input_compiles(shape_of, dynamic):
    # models pass normalized_shape as x.shape[-1:]: a torch.Size, and under dynamic shapes one of
    # symbolic sizes; the compiled call must match eager as the last dim changes
    def f(x, w):
        return dispatch.layer_norm(x, shape_of(x), None, None) + dispatch.rms_norm(x, shape_of(x), w[: x.shape[-1]])

    compiled = torch.compile(f, fullgraph=True, dynamic=dynamic)
    w = torch.randn(64)
    for n in (32, 48, 64):
        x = torch.randn(4, n)
        want = torch.nn.functional.layer_norm(x, [n]) + torch.nn.functional.rms_norm(x, [n], w[:n])
        torch.testing.assert_close(compiled(x, w), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_out_of_the_results_shape_is_written_in_a_fullgraph(dynamic):
    def f(x, o, s):
        dispatch.logsumexp(x, 1, out=s)
        return dispatch.softmax(x, -1, out=o) * 2 + s[:, None]

    compiled = torch.compile(f, fullgraph=True, dynamic=dynamic)
    for rows in (4, 6):
        x, o, s = torch.randn(rows, 8), torch.empty(rows, 8), torch.empty(rows)
        got = compiled(x, o, s)
        torch.testing.assert_close(o, torch.softmax(x, -1))
        torch.testing.assert_close(s, torch.logsumexp(x, 1))
        torch.testing.assert_close(got, torch.softmax(x, -1) * 2 + torch.logsumexp(x, 1)[:, None])


def test_a_compiled_logsumexp_into_a_finer_out_is_as_precise_as_eager():
    compiled = torch.compile(lambda x, s: dispatch.logsumexp(x, 0, out=s), fullgraph=True)
    x = torch.full((17,), 0.75, dtype=torch.float16)
    got, want = torch.empty(()), torch.empty(())  # (of the result's shape: a resize breaks the graph)
    compiled(x, got)
    torch.logsumexp(x, 0, out=want)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("fullgraph", [False, True], ids=["graph break", "fullgraph"])
def test_a_call_torch_refuses_raises_torchs_error_when_compiled(fullgraph):
    # the fake raises; with a graph break the custom op then runs for real from a compiled frame,
    # whose op function call must not be traced back into the custom op (a RecursionError)
    # (torch 2.11's Dynamo wraps an error a custom op's fake raises in its TorchRuntimeError, whose
    # message holds torch's error; torch 2.13 raises torch's error itself)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: dispatch.softmax(x, 5), backend="aot_eager", fullgraph=fullgraph)
    torchs = "Dimension out of range (expected to be in range of [-2, 1], but got 5)"
    with pytest.raises((IndexError, torch._dynamo.exc.TorchRuntimeError)) as got:
        compiled(torch.randn(3, 8))
    assert torchs in str(got.value)
    if not isinstance(got.value, IndexError):
        assert torch.__version__ < "2.13", "torch 2.13 raises torch's own error here"
        assert "got IndexError(" in str(got.value)
    if not fullgraph:
        with pytest.raises(TypeError, match="normalized_shape"):
            torch.compile(lambda x: dispatch.layer_norm(x, 8), backend="aot_eager")(torch.randn(3, 8))


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_an_eps_passed_into_the_compiled_function_takes_each_value(op):
    # Dynamo makes a float argument symbolic on its second value (layers of one class, each with
    # its own eps): the call's text argument needs it as a float
    torch._dynamo.reset()
    fn = getattr(dispatch, op)
    ref = getattr(torch.nn.functional, op)
    compiled = torch.compile(lambda x, eps: fn(x, (16,), None, eps=eps), backend="aot_eager", fullgraph=True)
    x = torch.randn(4, 16) + 3
    for eps in (1e-5, 1e-3, 0.5):
        torch.testing.assert_close(compiled(x, eps), ref(x, (16,), eps=eps))


@pytest.mark.parametrize("transform", ["grad", "vmap of grad"])
def test_a_torch_func_transform_compiled_matches_torchs_ops(transform):
    # the node's autograd function keeps its context apart from its forward (setup_context), as
    # torch.func needs when the transform is traced inside torch.compile
    import torch.nn.functional as F
    from torch.func import grad, vmap

    ours = lambda t: (dispatch.softmax(dispatch.layer_norm(t, (8,)), -1) ** 2).sum()  # noqa: E731
    theirs = lambda t: (torch.softmax(F.layer_norm(t, (8,)), -1) ** 2).sum()  # noqa: E731
    wrap = grad if transform == "grad" else (lambda f: vmap(grad(f)))
    torch._dynamo.reset()
    x = torch.randn(3, 8)
    torch.testing.assert_close(torch.compile(wrap(ours), backend="aot_eager")(x), wrap(theirs)(x))


class _Named(list):
    """A backend's kernel calls, appended to a shared list under the backend's name."""

    def __init__(self, name: str, into: list) -> None:
        super().__init__()
        self.name, self.into = name, into

    def append(self, op) -> None:
        super().append(op)
        self.into.append(self.name)


def _costed_with_backward(name: str, costs: dict, ran: list):
    """A softmax backend with cost figures whose forward and backward kernels say they ran (in ``ran``:
    ``"<name>"`` a forward, ``"<name> backward"`` a backward)."""
    plugin = chunked_backend.make(name, priority=0, calls=_Named(name, ran))

    @dispatch.hookimpl
    def dispatch_backend_info():
        return dispatch.BackendInfo(name=name, version="1.0", ops=("softmax",), priority={"cpu": 0}, costs=costs)

    def dispatch_backward(op, spec):
        def backward(grad, x, y):
            ran.append(f"{name} backward")
            return y * (grad - (grad * y).sum(-1, keepdim=True))
        return backward if op == "softmax" else None

    plugin.dispatch_backend_info = dispatch_backend_info
    plugin.dispatch_backward = dispatch.hookimpl(specname="dispatch_backward")(dispatch_backward)
    return plugin


def _compiled_step_beside_steady(name: str, costs: dict, ran: list):
    """``(x, f)``: backends ``name`` (with ``costs``) and "steady" registered and the only ones
    allowed (their kernel calls said in ``ran``), an input that requires grad, and a compiled
    function of a softmax call whose backward takes the two nodes."""
    dispatch.register(_costed_with_backward(name, costs, ran))
    dispatch.register(_costed_with_backward("steady", {"cpu": (5.0, 500.0)}, ran))
    dispatch.configure(allow=[name, "steady"])
    f = torch.compile(lambda t: (dispatch.softmax(t, -1) * torch.arange(256.0)).sum(), fullgraph=True,
                      backend="aot_eager")
    return torch.randn(64, 256, requires_grad=True), f


def _softmax_grads_match(x: torch.Tensor) -> None:
    xr = x.detach().clone().requires_grad_(True)
    (torch.softmax(xr, -1) * torch.arange(256.0)).sum().backward()
    torch.testing.assert_close(x.grad, xr.grad)


def test_a_compiled_backward_node_chooses_by_device_time_not_autograd_host_cost():
    # A compiled graph's nodes launch their kernels with no autograd.Function around them: the
    # backward node decides as a training call by device time (the cards' bandwidth, not their
    # launch figure, which for a training call stands for autograd's host cost). An eager training
    # call keeps weighing that cost: here it goes to "steady", the compiled step to "wide".
    ran: list[str] = []
    x, f = _compiled_step_beside_steady("wide", {"cpu": (1.0, 1000.0), "cpu:softmax:grad": (100.0, 1000.0)}, ran)
    explained = dispatch.explain("softmax", x)  # an eager training call, and what a compiled step runs
    assert explained.decision.backend == "steady"
    assert "backward: steady's own backward kernel" in str(explained)
    assert "backward in a torch.compile'd step: wide's own backward kernel" in str(explained)
    assert dispatch.explain("softmax", x.detach()).decision.backend == "wide"
    assert "torch.compile'd step" not in str(dispatch.explain("softmax", x.detach()))
    ran.clear()
    f(x).backward()
    assert set(ran) == {"wide", "wide backward"} and ran[-1] == "wide backward", ran
    _softmax_grads_match(x)
    ran.clear()
    x.grad = None
    (dispatch.softmax(x, -1) * torch.arange(256.0)).sum().backward()  # eager: steady, forward and backward
    assert set(ran) == {"steady", "steady backward"} and ran[-1] == "steady backward", ran
    _softmax_grads_match(x)
    for deny, expected in (([], "wide"), (["wide"], "steady")):  # a node met again; then settings
        dispatch.configure(allow=["wide", "steady"], deny=deny)  # that change the pick
        ran.clear()
        x.grad = None
        f(x).backward()
        assert set(ran) == {expected, f"{expected} backward"} and ran[-1] == f"{expected} backward", (deny, ran)
        _softmax_grads_match(x)


def test_a_compiled_backward_node_does_not_follow_a_forward_whose_backward_ranks_last():
    # The forward node is an inference call: a backend may win it whose card ranks its training
    # calls last (a fast forward, a slow backward: TileLang's norms). The backward node then runs
    # another backend's backward, and the gradients are right.
    ran: list[str] = []
    x, f = _compiled_step_beside_steady("forward_only", {"cpu": (1.0, 1000.0), "cpu:softmax:grad": "last"}, ran)
    assert "backward in a torch.compile'd step: steady's own backward kernel" in str(dispatch.explain("softmax", x))
    ran.clear()
    f(x).backward()
    assert set(ran) == {"forward_only", "steady backward"} and ran[-1] == "steady backward", ran
    _softmax_grads_match(x)


def test_a_backward_node_met_again_with_other_strides_or_sizes_gives_their_gradients():
    # The backward node keeps its chosen backward per call layout: met again with rows of another
    # length, or with strided rows, it must not reuse a backward made for another layout (the Triton
    # norm backward is built for its rows' shape)
    pytest.importorskip("triton")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    f = torch.compile(lambda t, w: dispatch.rms_norm(t, t.shape[-1:], w, backend="triton").square().sum(),
                      backend="aot_eager", dynamic=True)
    for x in (torch.randn(6, 32, device=dev), torch.randn(6, 64, device=dev)[:, :32], torch.randn(5, 16, device=dev)):
        x.requires_grad_(True)  # (a slice of a tensor that records no gradient: a leaf of its own)
        w = torch.randn(x.shape[-1], device=dev, requires_grad=True)
        f(x, w).backward()
        xr, wr = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
        torch.nn.functional.rms_norm(xr, x.shape[-1:], wr).square().sum().backward()
        torch.testing.assert_close(x.grad, xr.grad, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(w.grad, wr.grad, rtol=1e-4, atol=1e-4)


def _keeper(ran: list, stats_seen: list, costs: dict | None = None, name: str = "keeper", saving: bool = True,
            broken_saving: bool = False):
    """An rms_norm backend (``name``) whose forward fills its backward's buffer of each row's rstd
    when asked (``saves``), and whose backward says whether it was handed the buffer (first in the
    static order, or ranked by ``costs``); ``saving`` False: no backward of its own;
    ``broken_saving``: its forward raises when asked to fill the buffer."""
    import types

    plugin = types.SimpleNamespace()

    def rstd_of(x, eps):
        return torch.rsqrt(x.float().square().mean(-1) + eps)

    def eps_of(spec, x):
        eps = spec.attrs.get("eps")
        return torch.finfo(x.dtype).eps if eps is None else eps

    @dispatch.hookimpl
    def dispatch_backend_info():
        return dispatch.BackendInfo(name=name, version="1.0", ops=("rms_norm",), priority={"cpu": 200},
                                    costs=costs or {"cpu": (1.0, 1000.0)})

    @dispatch.hookimpl
    def dispatch_check(op, spec):
        if spec.tensors[1].present and spec.ndim == 2:
            return dispatch.Verdict.yes()
        return dispatch.Verdict.no("2-D inputs with a weight only")

    @dispatch.hookimpl
    def dispatch_kernel(op, spec, config):
        def run(x, weight=None, saved=None):
            rstd = rstd_of(x, eps_of(spec, x))
            if saved is not None:
                if broken_saving:
                    raise RuntimeError("keeper's saving forward crashed")
                saved[0].copy_(rstd)
            ran.append(f"{name} forward" + (" saving" if saved is not None else ""))
            return (x.float() * rstd[:, None] * weight.float()).to(x.dtype)
        return run

    @dispatch.hookimpl
    def dispatch_backward(op, spec):
        if not saving:
            return None

        def backward(grad, x, weight, y, *stats):
            ran.append(f"{name} backward" + (" with stats" if stats else ""))
            rstd = rstd_of(x, eps_of(spec, x))
            if stats:
                stats_seen.append(torch.equal(stats[0], rstd))
            xhat = x.float() * rstd[:, None]
            g = grad.float() * weight.float()
            dx = rstd[:, None] * (g - xhat * (g * xhat).mean(-1, keepdim=True))
            return dx.to(x.dtype), (grad.float() * xhat).sum(0).to(weight.dtype)

        backward.saves = lambda x, *rest: (torch.empty(x.shape[0], dtype=torch.float32, device=x.device),)
        return backward

    for hook in (dispatch_backend_info, dispatch_check, dispatch_kernel, dispatch_backward):
        setattr(plugin, hook.__name__, hook)
    return plugin


def _rms_grads_match(x, w) -> None:
    xr, wr = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
    torch.nn.functional.rms_norm(xr, x.shape[-1:], wr).square().sum().backward()
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(w.grad, wr.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("node_key", ["native", "python"])
def test_a_compiled_training_step_hands_the_forward_statistics_to_the_same_backends_backward(node_key,
                                                                                            monkeypatch):
    # An eager training call's forward fills the buffers its backend's backward asks for (a norm's
    # row statistics); a compiled step's forward node now does too, and the backward node hands
    # them on where the backend that filled them runs the backward: here "keeper", forward and
    # backward. The nodes key their calls natively where the native key is built, else in Python.
    import dispatch._compile_training as compiled

    if node_key == "python":
        monkeypatch.setattr(compiled._native, "tensor_key", lambda: None)
    ran: list[str] = []
    seen: list[bool] = []
    dispatch.register(_keeper(ran, seen))
    dispatch.configure(allow=["keeper", "torch"])
    f = torch.compile(lambda t, w: dispatch.rms_norm(t, t.shape[-1:], w).square().sum(), fullgraph=True,
                      backend="aot_eager")
    x = torch.randn(8, 64, requires_grad=True)
    w = torch.randn(64, requires_grad=True)
    for _ in range(3):
        ran.clear()
        x.grad = w.grad = None
        f(x, w).backward()
        _rms_grads_match(x, w)
    assert ran == ["keeper forward saving", "keeper backward with stats"], ran
    assert seen and all(seen), seen  # the buffer held the rows' rstd
    ran.clear()
    x.grad = w.grad = None
    with torch.no_grad():  # an inference graph: the plain node, nothing saved
        torch.compile(lambda t, w: dispatch.rms_norm(t, t.shape[-1:], w), fullgraph=True, backend="aot_eager")(x, w)
    assert ran == ["keeper forward"], ran


def test_a_backward_node_of_another_backend_is_not_handed_buffers_it_did_not_fill():
    # The step's backward runs under settings that deny the forward's backend: torch's backward
    # runs, with the statistics left out, and the gradients are right. Then allowed again, the
    # backward node goes back to "keeper" with the buffers.
    ran: list[str] = []
    dispatch.register(_keeper(ran, []))
    dispatch.configure(allow=["keeper", "torch"])
    f = torch.compile(lambda t, w: dispatch.rms_norm(t, t.shape[-1:], w).square().sum(), fullgraph=True,
                      backend="aot_eager")
    x = torch.randn(8, 64, requires_grad=True)
    w = torch.randn(64, requires_grad=True)
    f(x, w).backward()  # (resolves the forward)
    for deny, expected in ((["keeper"], ["keeper forward saving"]),
                           ([], ["keeper forward saving", "keeper backward with stats"])):
        ran.clear()
        x.grad = w.grad = None
        loss = f(x, w)
        with dispatch.use(deny=deny):
            loss.backward()
        assert ran == expected, (deny, ran)
        _rms_grads_match(x, w)


def test_a_compiled_triton_norm_backward_of_long_rows_gets_its_forwards_statistics(monkeypatch):
    # Triton's backward of long rows reads the row statistics its forward stores (else it
    # computes them again); a compiled step's nodes now pass them along, with real kernels.
    pytest.importorskip("triton")
    from dispatch_triton import norm_backward

    made, given = norm_backward.make_backward, []

    def spying(*args, **kwargs):
        backward = made(*args, **kwargs)

        def spy(grad, *rest):
            given.append(len(rest))
            return backward(grad, *rest)
        if hasattr(backward, "saves"):
            spy.saves = backward.saves
        return spy

    monkeypatch.setattr(norm_backward, "make_backward", spying)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    f = torch.compile(lambda t, w: dispatch.rms_norm(t, t.shape[-1:], w, backend="triton").square().sum(),
                      fullgraph=True, backend="aot_eager")
    x = torch.randn(3, 9000, device=dev, requires_grad=True)  # rows longer than 8192: the split backward
    w = torch.randn(9000, device=dev, requires_grad=True)
    for _ in range(2):
        given.clear()
        x.grad = w.grad = None
        f(x, w).backward()
        _rms_grads_match(x, w)
    assert given == [4], given  # (input, weight, output, statistics)


def test_a_compiled_training_step_runs_the_forward_of_the_backend_whose_backward_it_runs():
    # "quick" wins the inference call (the plain forward node's pick) and ranks last for training
    # calls; "keeper" is the training call's pick by device time, and its backward asks for the
    # forward's statistics: a compiled training step runs keeper's forward, which fills them, as an
    # eager training call under timing="device" does. An inference call still gets quick's.
    ran: list[str] = []
    dispatch.register(_keeper(ran, [], costs={"cpu": (5.0, 500.0)}))
    dispatch.register(_keeper(ran, [], costs={"cpu": (1.0, 1000.0), "cpu:rms_norm:grad": "last"}, name="quick",
                              saving=False))
    dispatch.configure(allow=["keeper", "quick"])
    x = torch.randn(8, 64, requires_grad=True)
    w = torch.randn(64, requires_grad=True)
    assert dispatch.explain("rms_norm", x.detach(), (64,), w.detach()).decision.backend == "quick"
    said = str(dispatch.explain("rms_norm", x, (64,), w))
    assert ("backward in a torch.compile'd step: keeper's own backward kernel, after keeper's forward, which fills "
            "the buffers it reads") in said, said
    f = torch.compile(lambda t, w: dispatch.rms_norm(t, t.shape[-1:], w).square().sum(), fullgraph=True,
                      backend="aot_eager")
    for i in range(3):  # (the first call also checks keeper's forward against the reference, on copies)
        ran.clear()
        x.grad = w.grad = None
        f(x, w).backward()
        _rms_grads_match(x, w)
        assert ran[-2:] == ["keeper forward saving", "keeper backward with stats"] and (i == 0 or len(ran) == 2), ran
    ran.clear()
    with torch.no_grad():
        torch.compile(lambda t, w: dispatch.rms_norm(t, t.shape[-1:], w), fullgraph=True, backend="aot_eager")(x, w)
    assert set(ran) == {"quick forward"}, ran  # (its first call checked on copies too)


def test_a_compiled_graph_carries_its_nodes_format_so_a_cache_never_mixes_them(monkeypatch):
    # torch's caches of compiled graphs key a graph by its text, not by the code of the nodes it
    # calls: a graph made for nodes of another format (other schemas, other outputs) must not be
    # taken for these, so the format is part of every node's arguments text
    import dispatch._compile_args as compiled

    def graph_code():
        torch._dynamo.reset()
        return torch._dynamo.explain(lambda t: dispatch.softmax(t, -1))(torch.randn(4, 8)).graphs[0].code

    first = graph_code()
    assert f'"graph format": ["int", {compiled.GRAPH_FORMAT}]' in first, first
    monkeypatch.setattr(compiled, "GRAPH_FORMAT", compiled.GRAPH_FORMAT + 1)
    assert graph_code() != first


def test_a_forward_node_whose_saving_kernel_raises_is_a_fault_and_the_plain_call_serves():
    # The training step's forward node runs keeper's kernel with the buffers; it raises: a fault
    # of the backend (a FaultWarning, keeper quarantined for the training call's bucket), and the
    # node's plain call serves the step, whose backward then runs without the buffers. Gradients
    # are right throughout.
    ran: list[str] = []
    dispatch.register(_keeper(ran, [], broken_saving=True))
    dispatch.configure(allow=["keeper", "torch"])
    f = torch.compile(lambda t, w: dispatch.rms_norm(t, t.shape[-1:], w).square().sum(), fullgraph=True,
                      backend="aot_eager")
    x = torch.randn(8, 64, requires_grad=True)
    w = torch.randn(64, requires_grad=True)
    with pytest.warns(dispatch.FaultWarning, match="keeper's saving forward crashed"):
        f(x, w).backward()
    _rms_grads_match(x, w)
    for _ in range(2):
        ran.clear()
        x.grad = w.grad = None
        f(x, w).backward()
        _rms_grads_match(x, w)
        assert "keeper forward saving" not in ran and not any("with stats" in r for r in ran), ran


def test_the_backward_node_without_buffers_is_kept_for_graphs_made_before_them():
    # A graph made before a training step's nodes kept buffers (an exported program that holds
    # one) calls dispatch::<op>_backward(grad, output, *tensors, args, needs)
    import dispatch._compile as compiled

    compiled.install()
    torch.compile(lambda t: dispatch.rms_norm(t, t.shape[-1:]), backend="aot_eager")(torch.randn(2, 8))
    x = torch.randn(4, 16, requires_grad=True)
    w = torch.randn(16, requires_grad=True)
    y = torch.nn.functional.rms_norm(x, (16,), w)
    g = torch.randn_like(y)
    args = compiled.encode({"normalized_shape": (16,), "eps": None, "backend": None})
    dx, dw = torch.ops.dispatch.rms_norm_backward(g, y.detach(), x.detach(), w.detach(), args, [True, True])
    ex, ew = torch.autograd.grad(y, (x, w), g)
    torch.testing.assert_close(dx, ex, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dw, ew, rtol=1e-4, atol=1e-5)
