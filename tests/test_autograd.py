"""Every op is differentiable whichever backend ran the forward."""

from __future__ import annotations

import warnings

import pytest
import torch

import dispatch

import chunked_backend

# where the GPU backends' tests run: their own device (the CPU serves Triton only under its interpreter)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(params=["torch", "chunked"])
def backend(request):
    if request.param == "chunked":
        dispatch.register(chunked_backend.make("chunked", priority=150))
    return request.param


@pytest.mark.parametrize("op,args", [("softmax", (-1,)), ("log_softmax", (1,)), ("logsumexp", (-1,)),
                                     ("logsumexp", (1, True))])
def test_gradients_match_torch(backend, op, args):
    x = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: getattr(dispatch, op)(t, *args, backend=backend), (x,))
    weight = torch.randn_like(getattr(torch, op)(x_ref, *args))
    (getattr(dispatch, op)(x, *args, backend=backend) * weight).sum().backward()
    (getattr(torch, op)(x_ref, *args) * weight).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)


def test_a_model_using_dispatch_softmax_trains():
    torch.manual_seed(0)
    dispatch.register(chunked_backend.make("chunked", priority=150))
    layer = torch.nn.Linear(8, 4)
    opt = torch.optim.SGD(layer.parameters(), lr=0.5)
    x, target = torch.randn(32, 8), torch.randint(0, 4, (32,))
    losses = []
    for _ in range(30):
        logp = dispatch.log_softmax(layer(x), -1)
        loss = torch.nn.functional.nll_loss(logp, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert dispatch.explain("log_softmax", layer(x), -1).decision.backend == "chunked"
    assert losses[-1] < losses[0] * 0.7


def test_no_grad_calls_do_not_build_a_graph():
    dispatch.register(chunked_backend.make("chunked", priority=150))
    x = torch.randn(2, 5, requires_grad=True)
    with torch.no_grad():
        y = dispatch.softmax(x)
    assert y.grad_fn is None
    assert dispatch.softmax(x).grad_fn is not None


def test_a_backward_gets_the_buffers_its_forward_filled():
    # a backend whose backward declares ``saves``: its forward kernel fills them (called with
    # saved=), autograd keeps them and hands them back after the output; without a graph they are
    # neither made nor passed
    plugin = chunked_backend.make("saver", priority=150)
    got = []

    def kernel(x, saved=()):
        y = torch.softmax(x, -1)
        if saved:
            saved[0].copy_(x.amax(-1))  # the row maxima: what this backward checks it received
        return y

    def backward(grad, x, y, *extra):
        got.append(extra)
        return y * (grad - (grad * y).sum(-1, keepdim=True))

    backward.saves = lambda x: (torch.empty(x.shape[0], dtype=x.dtype),)
    plugin.dispatch_kernel = dispatch.hookimpl(lambda op, spec, config: kernel)
    plugin.dispatch_backward = dispatch.hookimpl(lambda op, spec: backward if op == "softmax" else None)
    dispatch.register(plugin)
    x = torch.randn(4, 7, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 7, dtype=torch.float64)
    (dispatch.softmax(x, -1, backend="saver") * w).sum().backward()
    x_ref = x.detach().clone().requires_grad_()
    (torch.softmax(x_ref, -1) * w).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    assert len(got) == 1 and len(got[0]) == 1
    torch.testing.assert_close(got[0][0], x.detach().amax(-1))
    with torch.no_grad():
        y = dispatch.softmax(x, -1, backend="saver")
    torch.testing.assert_close(y, torch.softmax(x.detach(), -1))


def test_explain_names_the_declared_backward_a_backend_without_its_own_gets():
    dispatch.register(chunked_backend.make("nobwd", priority=500))
    x = torch.randn(4, 16, requires_grad=True)
    said = dispatch.explain("softmax", x, -1, backend="nobwd").backward
    assert "ships no backward kernel" in said and "the op's declared backward" in said


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm", "softmax"])
def test_a_gradient_penalty_differentiates_the_backward_as_torch_does(backend, op):
    # create_graph=True (a gradient penalty, a Hessian-vector product): the backward's result is
    # differentiated again; a backward kernel's gradients carry no graph, so they were wrong
    if backend not in dispatch.backends() or not dispatch.backends()[backend].available:
        pytest.skip(f"{backend} is not available here")
    torch.manual_seed(0)

    def loss(fn, x, w):
        y = fn(x * 1.5, w)
        out = (y * torch.arange(16.0, device=DEVICE)).sum()
        gx, = torch.autograd.grad(out, x, create_graph=True)
        return out + (gx ** 2).sum()

    import torch.nn.functional as F

    def call(module):
        kw = {"backend": backend} if module is dispatch else {}
        return {"rms_norm": lambda x, w: module.rms_norm(x, [16], w, **kw),
                "layer_norm": lambda x, w: module.layer_norm(x, [16], w, **kw),
                "softmax": lambda x, w: module.softmax(x * w, -1, **kw)}[op]

    x0, w0 = torch.randn(4, 16, dtype=torch.float32, device=DEVICE), torch.randn(16, device=DEVICE)
    got, want = [], []
    for module, into in ((dispatch, got), (F, want)):
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        loss(call(module), x, w).backward()
        into += [x.grad, w.grad]
    for g, r in zip(got, want):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)


def _modes(call):
    """``call`` (of a (3, 8) tensor) under forward-mode AD, vmap, grad and jit.trace, each as
    ``(mode, run)``; ``run()`` returns (dispatch's result, torch's)."""
    import warnings

    import torch.autograd.forward_ad as fwAD
    from torch.func import grad, vmap

    x, t = torch.randn(3, 8, device=DEVICE), torch.randn(3, 8, device=DEVICE)

    def forward_ad():
        with fwAD.dual_level():
            got = fwAD.unpack_dual(call(dispatch, fwAD.make_dual(x, t)))[1]
            want = fwAD.unpack_dual(call(torch, fwAD.make_dual(x, t)))[1]
        return got, want

    def traced():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            fn = torch.jit.trace(lambda a: call(dispatch, a), (x,))
        y = torch.randn(3, 8, device=DEVICE)
        return fn(y), call(torch, y)

    return [("forward-mode AD", forward_ad),
            ("torch.func", lambda: (vmap(lambda r: call(dispatch, r))(x), vmap(lambda r: call(torch, r))(x))),
            ("torch.func", lambda: (grad(lambda r: call(dispatch, r).pow(2).sum())(x),
                                    grad(lambda r: call(torch, r).pow(2).sum())(x))),
            ("torch.jit.trace", traced)]


_W = torch.randn(8)


def _norm(module, x, **kw):
    w = _W.to(x.device)
    if module is torch:
        return torch.nn.functional.rms_norm(x, [8], w)
    return module.rms_norm(x, [8], w, **kw)


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_forward_mode_ad_vmap_grad_and_jit_trace_run_torchs_own_op(backend):
    # a kernel would drop the tangent (forward AD), get wrapped tensors without storage (torch.func)
    # or be recorded as its empty output (jit.trace); these calls run torch's op, and no backend is
    # quarantined for them, also where the backend serves the same call outside them
    import warnings

    if backend not in dispatch.backends() or not dispatch.backends()[backend].available:
        pytest.skip(f"{backend} is not available here")
    with warnings.catch_warnings(), dispatch.use(allow=[backend]):
        warnings.simplefilter("error", dispatch.FaultWarning)
        x = torch.randn(3, 8, device=DEVICE)
        assert dispatch.explain("softmax", x, -1).decision.backend == backend  # (chosen, not forced)
        for call in (lambda m, a: m.softmax(a, -1), _norm):
            call(dispatch, torch.randn(3, 8, device=DEVICE))  # resolved outside the modes
            for mode, run in _modes(call):
                got, want = run()
                torch.testing.assert_close(got, want, msg=mode)
    assert not [f for f in dispatch.faults() if f.backend == backend]


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
@pytest.mark.parametrize("resolved", [False, True], ids=["first call", "resolved call"])
def test_a_backend_forced_under_those_modes_refuses_rather_than_run_torch_silently(backend, resolved):
    if backend not in dispatch.backends() or not dispatch.backends()[backend].available:
        pytest.skip(f"{backend} is not available here")
    for call in (lambda m, a, **kw: m.softmax(a, -1, **kw), _norm):
        if resolved:
            call(dispatch, torch.randn(3, 8, device=DEVICE), backend=backend)
        for mode, run in _modes(lambda m, a: call(m, a, **({} if m is torch else {"backend": backend}))):
            with pytest.raises(dispatch.BackendRefusedError, match=f"{backend!r} was forced.*{mode}"):
                run()
        forced_torch = _modes(lambda m, a: call(m, a, **({} if m is torch else {"backend": "torch"})))
        for mode, run in forced_torch:  # the reference forced: served
            got, want = run()
            torch.testing.assert_close(got, want, msg=mode)
    with pytest.raises(dispatch.UnknownBackendError, match="'nosuch' is not loaded"):
        torch.func.vmap(lambda r: dispatch.softmax(r, -1, backend="nosuch"))(torch.randn(3, 8))


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_an_input_made_under_inference_mode_with_a_weight_that_wants_its_gradient(backend, op):
    # autograd can't save an inference tensor for a backward: torch's op serves the call, and where
    # it needs no input for the weight's gradient (rms_norm's CPU op) it works; where torch's op saves
    # the input (layer_norm, CUDA's fused rms_norm), the call raises torch's own error. Neither is a
    # fault of the backend
    import warnings

    import torch.nn.functional as F

    if backend not in dispatch.backends() or not dispatch.backends()[backend].available:
        pytest.skip(f"{backend} is not available here")
    with torch.inference_mode():
        x = torch.randn(3, 16, device=DEVICE)
    w = torch.randn(16, device=DEVICE, requires_grad=True)
    try:
        want = getattr(F, op)(x, [16], w)
    except RuntimeError as exc:
        with warnings.catch_warnings(), pytest.raises(Exception) as raised:
            warnings.simplefilter("error", dispatch.FaultWarning)
            getattr(dispatch, op)(x, [16], w, backend=backend)
        assert type(raised.value) is type(exc) and str(raised.value) == str(exc)  # torch's own error
        assert not [f for f in dispatch.faults() if f.backend == backend]
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error", dispatch.FaultWarning)
        y = getattr(dispatch, op)(x, [16], w, backend=backend)
    torch.testing.assert_close(y, want)
    y.sum().backward()
    got_grad = w.grad.clone()
    w.grad = None
    want.sum().backward()
    torch.testing.assert_close(got_grad, w.grad)


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_keeps_only_its_output_for_the_backward(backend, op):
    # torch's softmax backward reads y alone: keeping x too costs activation memory, and made an
    # in-place change of x after the call break the backward
    if backend not in dispatch.backends() or not dispatch.backends()[backend].available:
        pytest.skip(f"{backend} is not available here")
    kept = []

    def pack(t):
        kept.append(tuple(t.shape))
        return t

    a = torch.randn(3, 8, device=DEVICE, requires_grad=True)
    h = a * 2
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = getattr(dispatch, op)(h, -1, backend=backend)
    assert len(kept) == 1
    g = torch.randn(3, 8, device=DEVICE)
    want, = torch.autograd.grad(getattr(torch, op)(a * 2, -1), a, g)
    h.add_(1.0)  # the input changes after the call
    got, = torch.autograd.grad(y, a, g)
    torch.testing.assert_close(got, want)


def test_a_kernels_graph_node_names_its_op():
    # a profile or a printed graph says which op's backward runs, as torch's own nodes do
    dispatch.register(chunked_backend.make("chunked", priority=150))
    x = torch.randn(4, 8, requires_grad=True)
    y = dispatch.log_softmax(x, -1, backend="chunked")
    z = dispatch.logsumexp(x, -1, backend="chunked")
    assert type(y.grad_fn).__name__ == "DispatchLogSoftmaxBackward"
    assert type(z.grad_fn).__name__ == "DispatchLogsumexpBackward"
    (y.sum() + z.sum()).backward()
    torch.testing.assert_close(x.grad, torch.func.grad(lambda t: (torch.log_softmax(t, -1).sum()
                                                                  + torch.logsumexp(t, -1).sum()))(x.detach()))


def _torch_kernels():
    """A CPU backend whose forward kernels are torch's own ops and which has no backward of its
    own: every call it serves takes the op's declared backward."""
    class TorchKernels:
        @dispatch.hookimpl
        def dispatch_backend_info(self):
            return dispatch.BackendInfo(name="torch_kernels", version="1", ops=("softmax", "log_softmax"),
                                        priority={"cpu": 200})

        @dispatch.hookimpl
        def dispatch_check(self, op, spec):
            return dispatch.Verdict.yes()

        @dispatch.hookimpl
        def dispatch_kernel(self, op, spec, config):
            fn, dims, out_dtype = getattr(torch, op), spec.dims, spec.out_dtype
            return lambda x: fn(x, dims[0], dtype=out_dtype) if dims else fn(x, 0, dtype=out_dtype)
    return TorchKernels()


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtypes", [(torch.float32, None), (torch.bfloat16, None), (torch.float16, None),
                                    (torch.bfloat16, torch.float32), (torch.float32, torch.float64)],
                         ids=lambda d: "-".join(str(t).replace("torch.", "") for t in d))
@pytest.mark.parametrize("shape,dim", [((3, 5, 7), 0), ((3, 5, 7), 1), ((3, 5, 7), -1), ((0, 4), 1), ((), 0)])
def test_the_declared_backward_gives_torchs_gradient(op, dtypes, shape, dim):
    # what every GPU backend's softmax-family call takes for its backward: torch's own fused kernel
    dtype, out_dtype = dtypes
    dispatch.register(_torch_kernels(), name="torch_kernels")
    x = torch.randn(shape, generator=torch.Generator().manual_seed(3)).to(dtype).requires_grad_(True)
    ref = x.detach().clone().requires_grad_(True)
    y = getattr(dispatch, op)(x, dim, dtype=out_dtype)
    assert dispatch.explain(op, x, dim, dtype=out_dtype).decision.backend == "torch_kernels"
    grad = torch.randn(y.shape, generator=torch.Generator().manual_seed(4)).to(y.dtype)
    got, = torch.autograd.grad(y, x, grad)
    want, = torch.autograd.grad(getattr(torch, op)(ref, dim, dtype=out_dtype), ref, grad)
    assert got.dtype == want.dtype == dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0)  # the same kernel, the same bits


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"))])
@pytest.mark.parametrize("backend", ["triton", "tilelang", None])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_a_norms_output_changed_in_place_still_differentiates_as_torchs_does(op, backend, device):
    # F.layer_norm(x).relu_(): torch's norms keep the input and statistics, not the output, so the
    # output may be changed in place before the backward; a backend's kernel must allow the same
    import torch.nn.functional as F

    if backend is not None and backend not in dispatch.backends():
        pytest.skip(f"{backend} not loaded")
    for shape in ((4, 8), (2, 3, 8)):  # (a 3-D input: a kernel's output may be a view of its 2-D rows)
        x = torch.randn(shape, device=device, requires_grad=True)
        w = torch.randn(8, device=device, requires_grad=True)
        x_ref, w_ref = (t.detach().clone().requires_grad_() for t in (x, w))
        try:
            y = getattr(dispatch, op)(x, [8], w, backend=backend)
        except dispatch.BackendRefusedError as refused:
            pytest.skip(f"{backend} does not serve it here: {refused.reason}")
        y.mul_(2).relu_()
        y.sum().backward()
        y_ref = getattr(F, op)(x_ref, [8], w_ref)
        y_ref.mul_(2).relu_()
        y_ref.sum().backward()
        torch.testing.assert_close(y, y_ref)
        torch.testing.assert_close(x.grad, x_ref.grad)
        torch.testing.assert_close(w.grad, w_ref.grad)


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_a_batch_of_grad_outputs_differentiates_as_torch_does(backend, op):
    # autograd.grad(is_grads_batched=True) and jacobian(vectorize=True) hand the backward a batch of
    # grad_outputs wrapped for vmap, which a kernel can't read: the gradients must still be torch's,
    # with no fault, and the backend must serve the next call
    import torch.nn.functional as F

    if backend not in dispatch.backends() or not dispatch.backends()[backend].available:
        pytest.skip(f"{backend} is not available here")
    torch.manual_seed(0)
    x0, w0 = torch.randn(3, 8, device=DEVICE), torch.randn(8, device=DEVICE)
    grads = torch.randn(5, 3, 8, device=DEVICE)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dispatch.FaultWarning)
        def batched(module, **kw):
            x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
            return torch.autograd.grad(getattr(module, op)(x, [8], w, **kw), (x, w), grads, is_grads_batched=True)

        for g, r in zip(batched(dispatch, backend=backend), batched(F)):
            torch.testing.assert_close(g, r)
        jac = torch.autograd.functional.jacobian(lambda t: getattr(dispatch, op)(t, [8], w0, backend=backend),
                                                 x0[:2], vectorize=True)
        ref = torch.autograd.functional.jacobian(lambda t: getattr(F, op)(t, [8], w0), x0[:2], vectorize=True)
        torch.testing.assert_close(jac, ref)
    x = x0.clone().requires_grad_()
    getattr(dispatch, op)(x, [8], w0, backend=backend).sum().backward()  # the backend still serves
    assert x.grad is not None and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_out_is_not_differentiated_through_as_torchs_is_not(backend, op):
    # torch records softmax(x, out=o) with a backward that raises: a loss reaching x only through
    # out= must raise, not hand x a gradient that torch's own call would refuse
    x = torch.randn(4, 16, requires_grad=True)
    for fn in (getattr(torch, op), lambda t, d, out: getattr(dispatch, op)(t, d, out=out, backend=backend)):
        out = torch.empty(4, 16)
        result = fn(x, -1, out=out)
        assert result is out
        torch.testing.assert_close(out, getattr(torch, op)(x.detach(), -1))
        with pytest.raises(RuntimeError, match="derivative"):
            out.sum().backward()
    assert x.grad is None
    for fn in (getattr(torch, op), getattr(dispatch, op)):  # compiled: both refuse to build the graph
        torch._dynamo.reset()
        compiled = torch.compile(lambda t, o, fn=fn: fn(t, -1, out=o), backend="aot_eager", fullgraph=True)
        with pytest.raises(Exception, match="derivative|exception"):
            compiled(x, torch.empty(4, 16))
    out = torch.empty(4, 16)
    with torch.no_grad():
        compiled(x, out)
    torch.testing.assert_close(out, getattr(torch, op)(x.detach(), -1))
