"""torch.autocast: a call made under autocast is served as the call torch makes, by a kernel.

Torch's CUDA autocast runs softmax and log_softmax with ``dtype=torch.float32`` and layer_norm
and logsumexp (rms_norm too, in some torch versions) on float32 casts of their tensors. The
built-in ops take that policy from torch (checked against torch on the GPU below); on the CPU, two
ops declared here with the
same policies for "cpu" check the mechanism: keys inside and outside autocast, the kernel that
serves the recast call, gradients, ``out=``, torch.compile.
"""

from __future__ import annotations

import attrs
import pytest
import torch
import torch.nn.functional as F

import dispatch
from dispatch import BackendInfo, Verdict
from dispatch._dispatcher import DISPATCHER
from dispatch.norms import LAYER_NORM
from dispatch.ops import SOFTMAX

from op_packages import op_package

BF16 = torch.bfloat16
# (a policy per device); its calls under autocast are made on float32 copies
AC_NORM = attrs.evolve(LAYER_NORM, name="ac_norm", autocast={"cpu": "fp32", "cuda": "fp32"}, autocast_in_kernel=False)
# the same op read in the kernel, as the built-in norms are: half-precision input, float32 result
AC_NORM_IN = attrs.evolve(LAYER_NORM, name="ac_norm_in", autocast={"cpu": "fp32"})
AC_SOFTMAX = attrs.evolve(SOFTMAX, name="ac_softmax", autocast={"cpu": "fp32_set_opt_dtype"})


def _recording_backend(seen: list):
    """A CPU backend serving both ops with torch's math, noting the dtypes each kernel is built for."""
    class Recording:
        @dispatch.hookimpl
        def dispatch_backend_info(self):
            return BackendInfo(name="recording", version="1", ops=("ac_norm", "ac_norm_in", "ac_softmax"),
                               priority={"cpu": 150})

        @dispatch.hookimpl
        def dispatch_check(self, op, spec):
            return Verdict.yes()

        @dispatch.hookimpl
        def dispatch_kernel(self, op, spec, config):
            seen.append((op, spec.dtype, spec.out_dtype))
            if op == "ac_softmax":
                return lambda x: torch.softmax(x, spec.dims[0], dtype=spec.out_dtype)
            eps, shape, out_dtype = spec.attrs["eps"], spec.attrs["normalized_shape"], spec.out_dtype
            return lambda x, w, b: F.layer_norm(x.to(out_dtype), shape, w, b, eps)
    return Recording()


@pytest.fixture
def ops():
    seen: list = []
    dispatch.register(op_package(AC_NORM, AC_NORM_IN, AC_SOFTMAX), name="autocast_ops")
    dispatch.register(_recording_backend(seen), name="recording")
    try:
        yield seen
    finally:
        dispatch.unregister("recording")
        dispatch.unregister("autocast_ops")


def _inputs(n=48):
    gen = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(shape, generator=gen).to(BF16) for shape in ((6, n), (n,), (n,)))
    return x, w, b


def _norm_function(python_key: bool):
    return DISPATCHER.python_key_function("ac_norm") if python_key else dispatch.op("ac_norm")


@pytest.mark.parametrize("python_key", [False, True], ids=["native key", "python key"])
def test_a_call_under_autocast_is_torchs_float32_call_served_by_the_kernel(ops, python_key):
    x, w, b = _inputs()
    ac_norm = _norm_function(python_key)
    before = ac_norm(x, (48,), w, b)
    with torch.autocast("cpu", dtype=BF16):
        inside = ac_norm(x, (48,), w, b)
        again = ac_norm(x, (48,), w, b)
    after = ac_norm(x, (48,), w, b)
    expected = F.layer_norm(x.float(), (48,), w.float(), b.float())  # what torch's fp32 policy computes
    assert inside.dtype == again.dtype == torch.float32
    torch.testing.assert_close(inside, expected)
    torch.testing.assert_close(again, expected)
    # outside the region the call is the bfloat16 call again, not the one resolved inside
    assert before.dtype == after.dtype == BF16
    torch.testing.assert_close(after, F.layer_norm(x, (48,), w, b))
    assert ("ac_norm", torch.float32, torch.float32) in ops  # a kernel served the float32 call
    assert ("ac_norm", BF16, BF16) in ops


def test_an_op_read_in_the_kernel_gets_the_half_precision_input_and_a_float32_result(ops):
    # no float32 copy of the input: the kernel reads bfloat16 and writes float32 (the copy's bytes saved)
    x, w, b = _inputs()
    with torch.autocast("cpu", dtype=BF16):
        inside = dispatch.ac_norm_in(x, (48,), w, b)
        again = dispatch.ac_norm_in(x, (48,), w, b)
        explained = dispatch.explain("ac_norm_in", x, (48,), w, b)
    after = dispatch.ac_norm_in(x, (48,), w, b)
    expected = F.layer_norm(x.float(), (48,), w.float(), b.float())
    assert inside.dtype == again.dtype == torch.float32 and after.dtype == BF16
    torch.testing.assert_close(inside, expected)
    torch.testing.assert_close(again, expected)
    torch.testing.assert_close(after, F.layer_norm(x, (48,), w, b))
    assert ops.count(("ac_norm_in", BF16, torch.float32)) == 1  # built once, for the half-precision input
    assert ("ac_norm_in", torch.float32, torch.float32) not in ops
    spec = explained.decision.spec
    assert (spec.dtype, spec.out_dtype, spec.tensors[1].dtype) == (BF16, torch.float32, torch.float32)
    assert explained.hot and explained.decision.backend == "recording"
    assert "bfloat16, 48 float32, 48 float32->float32" in str(explained)


def _norm_in_backend(name: str, kernel, backward=None, check=lambda spec: Verdict.yes()):
    """A CPU backend of ac_norm_in: ``kernel(spec)`` and ``backward(spec)`` make its kernels."""
    class NormIn:
        @dispatch.hookimpl
        def dispatch_backend_info(self):
            return BackendInfo(name=name, version="1", ops=("ac_norm_in",), priority={"cpu": 150})

        @dispatch.hookimpl
        def dispatch_check(self, op, spec):
            return check(spec)

        @dispatch.hookimpl
        def dispatch_kernel(self, op, spec, config):
            return kernel(spec)

        @dispatch.hookimpl
        def dispatch_backward(self, op, spec):
            return None if backward is None else backward(spec)
    return NormIn()


def test_a_backend_that_writes_the_inputs_dtype_is_a_fault_and_torch_serves():
    # a backend written before read-in-the-kernel calls existed, ignoring spec.out_dtype, returns
    # bfloat16: the first call's check finds it, and the reference's float32 result is returned
    ignoring = _norm_in_backend("ignoring", lambda spec: lambda x, w, b: F.layer_norm(
        x, spec.attrs["normalized_shape"], w.to(x.dtype), b.to(x.dtype)))
    dispatch.register(op_package(AC_NORM_IN), name="autocast_ops")
    dispatch.register(ignoring, name="ignoring")
    try:
        x, w, b = _inputs()
        with torch.autocast("cpu", dtype=BF16), pytest.warns(dispatch.FaultWarning, match="dtype torch.bfloat16"):
            got = dispatch.ac_norm_in(x, (48,), w.float(), b.float())
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, F.layer_norm(x.float(), (48,), w.float(), b.float()))
    finally:
        dispatch.unregister("ignoring")
        dispatch.unregister("autocast_ops")


def _float32_only(name="fp32only"):
    """A CPU backend of ac_norm_in that serves float32 calls and refuses a half-precision input read
    as float32 (as TileLang's norms do); its kernel notes the dtypes it is built for."""
    seen = []

    def kernel(spec):
        seen.append((spec.dtype, spec.out_dtype))
        return lambda x, w, b: F.layer_norm(x, spec.attrs["normalized_shape"], w, b, spec.attrs["eps"])

    def check(spec):
        return Verdict.no("writes the input's dtype") if spec.out_dtype != spec.dtype else Verdict.yes()
    return _norm_in_backend(name, kernel, check=check), seen


@pytest.mark.parametrize("how", ["forced", "use", "chosen", "compiled"])
def test_a_backend_that_serves_only_the_float32_call_still_serves_it_on_a_copy(how):
    # read in the kernel is a saving, not a new requirement: where the backend forced or chosen
    # refuses the half-precision input, the call is made on a float32 copy, as before
    backend, seen = _float32_only()
    dispatch.register(op_package(AC_NORM_IN), name="autocast_ops")
    dispatch.register(backend, name="fp32only")
    try:
        x, w, b = _inputs()
        w32, b32 = w.float(), b.float()
        calls = {"forced": lambda: dispatch.ac_norm_in(x, (48,), w32, b32, backend="fp32only"),
                 "use": lambda: dispatch.ac_norm_in(x, (48,), w32, b32),
                 "chosen": lambda: dispatch.ac_norm_in(x, (48,), w32, b32),
                 "compiled": lambda: torch.compile(
                     lambda t: dispatch.ac_norm_in(t, (48,), w32, b32, backend="fp32only"), fullgraph=True,
                     backend="aot_eager")(x)}
        torch._dynamo.reset()
        scope = dispatch.use(backend="fp32only") if how == "use" else dispatch.use()
        with torch.autocast("cpu", dtype=BF16), scope:
            got = calls[how]()
            again = calls[how]()
            explained = dispatch.explain("ac_norm_in", x, (48,), w32, b32)
        want = F.layer_norm(x.float(), (48,), w32, b32)
        assert got.dtype == again.dtype == torch.float32
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(again, want)
        assert (torch.float32, torch.float32) in seen and (BF16, torch.float32) not in seen
        if how in ("chosen", "use"):
            assert explained.decision.backend == "fp32only" and explained.decision.spec.dtype == torch.float32
    finally:
        torch._dynamo.reset()
        dispatch.unregister("fp32only")
        dispatch.unregister("autocast_ops")


def test_an_op_evolved_from_a_norm_with_an_output_rule_of_its_own_returns_float32():
    # an op made from a built-in norm keeps autocast_in_kernel; where its own output rule ignores
    # spec.out_dtype, its calls are made on a float32 copy (torch's result dtype), eager and compiled
    shape, eps = [48], 1e-5
    mine = attrs.evolve(LAYER_NORM, name="my_norm", autocast={"cpu": "fp32"},
                        output=lambda spec: (spec.shape, spec.dtype),
                        reference=lambda spec: lambda x, w=None, b=None: F.layer_norm(x, shape, w, b, eps))
    dispatch.register(op_package(mine), name="my_ops")
    try:
        x, w, b = _inputs()
        torch._dynamo.reset()
        compiled = torch.compile(lambda t: dispatch.my_norm(t, (48,), w.float(), b.float()), fullgraph=True,
                                 backend="aot_eager")
        with torch.autocast("cpu", dtype=BF16):
            eager, graph = dispatch.my_norm(x, (48,), w.float(), b.float()), compiled(x)
        want = F.layer_norm(x.float(), (48,), w.float(), b.float())
        for got in (eager, graph):
            assert got.dtype == torch.float32
            torch.testing.assert_close(got, want)
    finally:
        torch._dynamo.reset()
        dispatch.unregister("my_ops")


@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
def test_a_backward_that_returns_a_float32_input_gradient_is_cast_in_a_compiled_graph(compiler):
    # a float32 grad_output for a bfloat16 input: a backward kernel that returns dx in float32 is
    # cast by autograd in eager; the compiled graph's backward node must cast it too (its buffer is
    # read as the input's dtype by the next node)
    def kernel(spec):
        shape, eps, out = spec.attrs["normalized_shape"], spec.attrs["eps"], spec.out_dtype
        return lambda x, w, b: F.layer_norm(x.to(out), shape, w, b, eps)

    def backward(spec):
        shape, eps, out = spec.attrs["normalized_shape"], spec.attrs["eps"], spec.out_dtype

        def run(grad, x, w, b, y):
            with torch.enable_grad():
                leaves = [x.detach().to(out).requires_grad_(), w.detach().requires_grad_(),
                          b.detach().requires_grad_()]
                return torch.autograd.grad(F.layer_norm(leaves[0], shape, leaves[1], leaves[2], eps), leaves, grad)
        return run

    dispatch.register(op_package(AC_NORM_IN), name="autocast_ops")
    dispatch.register(_norm_in_backend("f32grads", kernel, backward), name="f32grads")
    try:
        x, w, b = _inputs()

        def step(fn):
            leaves = [x.clone().requires_grad_(), w.float().requires_grad_(), b.float().requires_grad_()]
            with torch.autocast("cpu", dtype=BF16):
                fn(*leaves).backward()
            return leaves[0].grad

        weights = torch.arange(48.0)
        want = step(lambda t, u, v: (F.layer_norm((t * 3).float(), (48,), u, v) * weights).sum())
        torch._dynamo.reset()
        got = step(torch.compile(lambda t, u, v: (dispatch.ac_norm_in(t * 3, (48,), u, v) * weights).sum(),
                                 backend=compiler, fullgraph=True))
        assert got.dtype == BF16
        torch.testing.assert_close(got, want)
    finally:
        torch._dynamo.reset()
        dispatch.unregister("f32grads")
        dispatch.unregister("autocast_ops")


def test_set_opt_dtype_gives_float32_unless_a_dtype_is_given(ops):
    x, _, _ = _inputs()
    with torch.autocast("cpu", dtype=BF16):
        plain = dispatch.ac_softmax(x, -1)
        given = dispatch.ac_softmax(x, -1, dtype=BF16)
        single = dispatch.ac_softmax(x.float(), 0)
    assert plain.dtype == torch.float32 and given.dtype == BF16 and single.dtype == torch.float32
    torch.testing.assert_close(plain, torch.softmax(x, -1, dtype=torch.float32))
    torch.testing.assert_close(given, torch.softmax(x, -1, dtype=BF16))
    torch.testing.assert_close(single, torch.softmax(x.float(), 0))
    assert ("ac_softmax", BF16, torch.float32) in ops


@pytest.mark.parametrize("op", ["ac_norm", "ac_norm_in"], ids=["cast copies", "read in the kernel"])
def test_gradients_flow_back_to_the_half_precision_tensors(ops, op):
    x, w, b = (t.clone().requires_grad_(True) for t in _inputs())
    with torch.autocast("cpu", dtype=BF16):
        out = getattr(dispatch, op)(x, (48,), w, b)
    out.square().sum().backward()
    ref = [t.detach().clone().requires_grad_(True) for t in (x, w, b)]
    F.layer_norm(ref[0].float(), (48,), ref[1].float(), ref[2].float()).square().sum().backward()
    for got, want in zip((x, w, b), ref):
        assert got.grad.dtype == BF16
        torch.testing.assert_close(got.grad, want.grad)


def test_an_out_call_is_left_as_it_is(ops):
    # torch's autocast does not touch out= overloads: the result is the bfloat16 call's
    x, _, _ = _inputs()
    out = torch.empty(0, dtype=BF16)
    with torch.autocast("cpu", dtype=BF16):
        returned = dispatch.ac_softmax(x, -1, out=out)
    assert returned is out and out.dtype == BF16
    torch.testing.assert_close(out, torch.softmax(x, -1))


def test_a_compiled_call_under_autocast_matches_eager(ops):
    x, w, b = _inputs()
    torch._dynamo.reset()
    try:
        compiled = torch.compile(lambda t, u, v: dispatch.ac_norm(t, (48,), u, v) + dispatch.ac_softmax(t, -1),
                                 fullgraph=True, backend="aot_eager")
        with torch.autocast("cpu", dtype=BF16):
            got = compiled(x, w, b)
            eager = dispatch.ac_norm(x, (48,), w, b) + dispatch.ac_softmax(x, -1)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, eager)
        plain = compiled(x, w, b)  # outside the region: the bfloat16 calls
        assert plain.dtype == BF16
    finally:
        torch._dynamo.reset()


@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
def test_a_compiled_call_read_in_the_kernel_is_one_node_of_the_half_precision_input(ops, compiler):
    # the graph's node takes the bfloat16 input and gives float32 (no cast node before it); its
    # kernel and its backward are the eager call's
    x, w, b = _inputs()
    w32, b32 = w.float(), b.float()
    torch._dynamo.reset()
    try:
        compiled = torch.compile(lambda t, u, v: dispatch.ac_norm_in(t, (48,), u, v), fullgraph=True,
                                 backend=compiler)
        xg = x.clone().requires_grad_()
        with torch.autocast("cpu", dtype=BF16):
            got = compiled(x, w32, b32)
            trained = compiled(xg, w32, b32)
        want = F.layer_norm(x.float(), (48,), w32, b32)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want)
        trained.square().sum().backward()
        xr = x.clone().requires_grad_()
        F.layer_norm(xr.float(), (48,), w32, b32).square().sum().backward()
        assert xg.grad.dtype == BF16
        torch.testing.assert_close(xg.grad, xr.grad)
        assert ("ac_norm_in", BF16, torch.float32) in ops and ("ac_norm_in", torch.float32, torch.float32) not in ops
        assert compiled(x, w32, b32).dtype == BF16  # outside the region: the bfloat16 call
    finally:
        torch._dynamo.reset()


BUILTIN = {
    "softmax": (lambda t: dispatch.softmax(t, -1), lambda t: F.softmax(t, -1)),
    "log_softmax": (lambda t: dispatch.log_softmax(t, 0), lambda t: F.log_softmax(t, 0)),
    "logsumexp": (lambda t: dispatch.logsumexp(t, -1), lambda t: torch.logsumexp(t, -1)),
    "layer_norm": (lambda t: dispatch.layer_norm(t, (t.shape[-1],)), lambda t: F.layer_norm(t, (t.shape[-1],))),
    "rms_norm": (lambda t: dispatch.rms_norm(t, (t.shape[-1],)), lambda t: F.rms_norm(t, (t.shape[-1],))),
}


def _devices():
    return ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("op", list(BUILTIN))
@pytest.mark.parametrize("dtype", [BF16, torch.float16, torch.float32])
def test_builtin_ops_under_autocast_return_what_torch_returns(op, device, dtype):
    ours, theirs = BUILTIN[op]
    x = torch.randn(64, 1000, generator=torch.Generator().manual_seed(1)).to(device=device, dtype=dtype)
    with torch.autocast(device, dtype=BF16 if device == "cpu" else torch.float16):
        got, want = ours(x), theirs(x)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, **({} if want.dtype != BF16 else {"rtol": 2e-2, "atol": 2e-2}))


def test_a_policy_is_checked_at_declaration():
    with pytest.raises(ValueError, match="device type 'xla'.*'cuda', 'cpu'"):
        attrs.evolve(LAYER_NORM, name="bad_norm", autocast={"xla": "fp32"})
    with pytest.raises(ValueError, match="policy 'fp16'.*'fp32', 'fp32_set_opt_dtype'"):
        attrs.evolve(LAYER_NORM, name="bad_norm", autocast={"cuda": "fp16"})
    with pytest.raises(ValueError, match="'fp32_set_opt_dtype' sets the op's 'dtype'.*has none"):
        attrs.evolve(LAYER_NORM, name="bad_norm", autocast={"cuda": "fp32_set_opt_dtype"})
    with pytest.raises(ValueError, match="'autocast_in_kernel' applies to the autocast policy 'fp32'"):
        attrs.evolve(AC_SOFTMAX, name="bad_softmax", autocast_in_kernel=True)
    with pytest.raises(TypeError, match="must map device types to policies"):
        attrs.evolve(LAYER_NORM, name="bad_norm", autocast=("cuda",))


def test_explain_says_which_call_runs_under_autocast(ops):
    x, w, b = _inputs()
    with torch.autocast("cpu", dtype=BF16):
        explained = dispatch.explain("ac_norm", x, (48,), w, b)
    assert explained.decision.spec.dtype == torch.float32 and explained.decision.backend == "recording"
    text = str(explained)
    assert "6x48 bfloat16" in text.splitlines()[0] and "under torch.autocast, served as" in text
    assert dispatch.explain("ac_norm", x, (48,), w, b).autocast is None  # outside: the call as it is


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("shape", [(64, 4096), (4, 65536), (3, 1000)])
def test_a_norm_under_cuda_autocast_reads_its_half_precision_input_in_a_kernel(op, shape):
    # the float32 call torch's autocast makes, served by Triton from the bfloat16 input (no float32 copy)
    from dispatch import norms

    if not dict(getattr(norms, op.upper()).autocast):
        pytest.skip(f"this torch's autocast leaves {op} as it is")
    gen = torch.Generator().manual_seed(0)
    n = shape[-1]
    x0 = (torch.randn(shape, generator=gen) * 2 + 1).to(device="cuda", dtype=BF16)
    w0, b0 = torch.randn(n, generator=gen).cuda(), torch.randn(n, generator=gen).cuda()
    extra = (b0,) if op == "layer_norm" else ()
    results = []
    for fn, kw in ((getattr(dispatch, op), {"backend": "triton"}), (getattr(dispatch, op), {}), (getattr(F, op), {})):
        x, w, *rest = (t.clone().requires_grad_() for t in (x0, w0, *extra))
        with torch.autocast("cuda", dtype=BF16):
            y = fn(x, [n], w, *rest, **kw)
        dy = torch.randn(y.shape, generator=gen.manual_seed(1)).to(y)
        y.backward(dy)
        results.append((y, [t.grad for t in (x, w, *rest)]))
    (forced, forced_grads), (picked, picked_grads), (want, want_grads) = results
    for y, grads in ((forced, forced_grads), (picked, picked_grads)):
        assert y.dtype == want.dtype == torch.float32
        torch.testing.assert_close(y, want, rtol=1e-4, atol=1e-4)
        for g, r in zip(grads, want_grads):
            assert g.dtype == r.dtype
            scale = r.float().abs().max().clamp_min(1)
            torch.testing.assert_close(g.float() / scale, r.float() / scale, rtol=2e-2, atol=2e-2)
    with torch.autocast("cuda", dtype=BF16):
        spec = dispatch.explain(op, x0, [n], w0, *extra, backend="triton").decision.spec
    assert (spec.dtype, spec.out_dtype) == (BF16, torch.float32)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_compiled_layer_norm_under_cuda_autocast_is_torchs_float32_call():
    from dispatch import norms

    if not dict(norms.LAYER_NORM.autocast):
        pytest.skip("this torch's autocast leaves layer_norm as it is")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4096, generator=gen).to(device="cuda", dtype=BF16)
    w, b = torch.randn(4096, generator=gen).cuda(), torch.randn(4096, generator=gen).cuda()
    torch._dynamo.reset()
    try:
        compiled = torch.compile(lambda t: dispatch.layer_norm(t, [4096], w, b), fullgraph=True)
        with torch.autocast("cuda", dtype=BF16):
            got, want = compiled(x), F.layer_norm(x, [4096], w, b)
        assert got.dtype == want.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    finally:
        torch._dynamo.reset()
