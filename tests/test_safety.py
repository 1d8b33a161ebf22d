"""A user's tensors are sacred, and no call can hang: checks run on copies, faulting kernels retry
outside the lock, and the hot-path key never aliases arguments torch tells apart."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest
import torch

import dispatch
from dispatch._dispatcher import DISPATCHER
from dispatch.errors import FaultWarning

import chunked_backend


def test_a_kernel_that_writes_into_its_input_leaves_the_users_tensor_and_result_intact():
    dispatch.register(chunked_backend.make("vandal", fault="writes input", priority=200))
    x = torch.randn(8, 64)
    original = x.clone()
    with pytest.warns(FaultWarning, match="wrote into its input"):
        y = dispatch.softmax(x)
    assert torch.equal(x, original)  # the user's input is untouched
    torch.testing.assert_close(y, torch.softmax(original, -1))
    assert dispatch.explain("softmax", x).decision.backend == "torch"
    y2 = dispatch.softmax(x)
    assert torch.equal(x, original) and torch.allclose(y2, torch.softmax(original, -1))


def test_a_kernel_that_returns_an_alias_of_its_input_is_quarantined():
    dispatch.register(chunked_backend.make("aliaser", fault="alias", priority=200))
    x = torch.randn(8, 64)
    original = x.clone()
    with pytest.warns(FaultWarning, match="shares memory with its input|wrote into its input"):
        y = dispatch.softmax(x)
    assert torch.equal(x, original) and y.data_ptr() != x.data_ptr()
    torch.testing.assert_close(y, torch.softmax(original, -1))


def test_a_kernel_that_writes_into_its_input_never_wins_a_race():
    dispatch.register(chunked_backend.make("vandal", fault="writes input", priority=200))
    dispatch.configure(autotune=True, allow=["torch", "vandal"])
    x = torch.randn(8, 64)
    original = x.clone()
    with pytest.warns(FaultWarning, match="'vandal' could not be tuned.*wrote into its input"):
        decision = dispatch.explain("softmax", x).decision
    assert decision.backend == "torch"
    vandal = next(c for c in decision.candidates if c.name == "vandal")
    assert vandal.latency_us is None and "input" in vandal.note
    assert torch.equal(x, original)


def test_a_kernel_that_faults_later_with_list_dims_and_threads_never_hangs():
    dispatch.register(chunked_backend.make("flaky", fault="raise later", priority=200))
    x = torch.randn(8, 64)
    results, errors = [], []

    def work():
        try:
            for _ in range(5):
                results.append(dispatch.logsumexp(x, [1]))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FaultWarning)
        threads = [threading.Thread(target=work, daemon=True) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a call hung"
    assert not errors and len(results) == 40
    for r in results:
        torch.testing.assert_close(r, torch.logsumexp(x, [1]))


@pytest.mark.parametrize("bad", [1.0, True])
def test_after_a_resolved_int_dim_a_float_or_bool_dim_raises_torchs_error(bad):
    x = torch.randn(4, 8)
    dispatch.softmax(x, 1)
    with pytest.raises(TypeError) as ours:
        dispatch.softmax(x, bad)
    with pytest.raises(TypeError) as theirs:
        torch.softmax(x, bad)
    assert type(ours.value) is type(theirs.value)


def test_keepdim_must_be_a_bool_even_after_a_resolved_call():
    x = torch.randn(4, 8)
    dispatch.logsumexp(x, 1, keepdim=True)
    with pytest.raises(TypeError):
        torch.logsumexp(x, 1, keepdim=1.0)
    with pytest.raises(TypeError):
        dispatch.logsumexp(x, 1, keepdim=1.0)


def test_a_numpy_integer_dim_works_as_in_torch():
    x = torch.randn(4, 8)
    torch.testing.assert_close(dispatch.softmax(x, np.int64(1)), torch.softmax(x, np.int64(1)))
    torch.testing.assert_close(dispatch.logsumexp(x, np.int64(0)), torch.logsumexp(x, np.int64(0)))


def test_list_dims_take_the_hot_path_after_the_first_call(monkeypatch):
    x = torch.randn(4, 8, 3)
    resolved = []
    call = DISPATCHER.call
    monkeypatch.setattr(DISPATCHER, "call", lambda *a, **k: resolved.append(a[0]) or call(*a, **k))
    for _ in range(3):
        torch.testing.assert_close(dispatch.logsumexp(x, [0, 1]), torch.logsumexp(x, [0, 1]))
    assert resolved == ["logsumexp"]
    with pytest.raises(TypeError):  # the list's elements are keyed by type too
        dispatch.logsumexp(x, [0.0, 1])


def test_a_kernel_or_backward_that_exits_cannot_end_the_process():
    from dispatch_pytest.cases import Case
    from dispatch_pytest.conformance import FAIL, run_case

    plugin = chunked_backend.make("quitter", priority=-100)
    inner = plugin.dispatch_kernel

    @dispatch.hookimpl
    def dispatch_kernel(op, spec, config):
        def run(x):
            raise SystemExit(3)
        return run

    @dispatch.hookimpl
    def dispatch_backward(op, spec):
        def backward(grad, x, y):
            raise SystemExit(4)
        return backward

    assert inner is not None
    plugin.dispatch_kernel, plugin.dispatch_backward = dispatch_kernel, dispatch_backward
    dispatch.register(plugin)
    result = run_case("quitter", Case("softmax", torch.float32, (4, 16)), device="cpu")
    assert result.outcome == FAIL and "SystemExit" in result.reason
    plugin.dispatch_kernel = inner  # a working forward, an exiting backward
    dispatch.unregister("quitter")
    dispatch.register(plugin)
    x = torch.randn(4, 16, requires_grad=True)
    y = dispatch.softmax(x, -1, backend="quitter")
    with pytest.raises(dispatch.BackendFaultError, match="quitter.*backward kernel raised SystemExit"):
        y.sum().backward()


def test_a_kernel_handing_back_one_buffer_it_keeps_is_quarantined_and_earlier_results_stay():
    plugin = chunked_backend.make("keeper", priority=500)
    kept = {}

    @dispatch.hookimpl
    def dispatch_kernel(op, spec, config):
        def run(x):
            out = kept.setdefault(tuple(x.shape), torch.empty_like(x))
            torch.softmax(x, -1, out=out)
            return out
        return run

    plugin.dispatch_kernel = dispatch_kernel
    dispatch.register(plugin)
    x = torch.randn(4, 16)
    with pytest.warns(dispatch.FaultWarning, match="'keeper' returned the same memory from two calls"):
        first = dispatch.softmax(x, -1)
    held = first.clone()
    dispatch.softmax(torch.randn(4, 16), -1)  # served elsewhere now: the first result stays the caller's
    assert torch.equal(first, held)
    torch.testing.assert_close(first, torch.softmax(x, -1))


def _with_backward(backward_hook, name="bwd"):
    """The chunked test backend (right forward, priority above torch's) with ``backward_hook`` as
    its dispatch_backward."""
    plugin = chunked_backend.make(name, priority=500)
    plugin.dispatch_backward = dispatch.hookimpl(backward_hook)
    dispatch.register(plugin)
    return plugin


def _raising(op, spec):
    def backward(grad, x, y):
        return 1 / 0
    return backward


def _wrong_shape(op, spec):
    def backward(grad, x, y):
        return grad[:, :3]
    return backward


def _too_many(op, spec):
    def backward(grad, x, y):
        return grad, grad
    return backward


def _none(op, spec):
    def backward(grad, x, y):
        return None
    return backward


def _writes_grad(op, spec):
    def backward(grad, x, y):
        g = y * (grad - (grad * y).sum(-1, keepdim=True))
        grad.zero_()  # the user's grad_output
        return g
    return backward


def _writes_output(op, spec):
    def backward(grad, x, y):
        g = y * (grad - (grad * y).sum(-1, keepdim=True))
        y.mul_(0)  # the user's forward result
        return g
    return backward


def _served_by_bwd(hook):
    """``(x, softmax(x))`` of a call the backend "bwd" with backward ``hook`` serves, autograd recording."""
    _with_backward(hook)
    x = torch.randn(4, 16, requires_grad=True)
    y = dispatch.softmax(x, -1)
    assert dispatch.explain("softmax", x, -1).decision.backend == "bwd"
    return x, y


@pytest.mark.parametrize("hook", [_writes_grad, _writes_output], ids=["grad_output", "output"])
def test_a_backward_kernel_writing_into_the_users_tensors_is_a_fault_and_they_stay(hook):
    x, y = _served_by_bwd(hook)
    g = torch.randn(4, 16)
    y_before, g_before = y.detach().clone(), g.clone()
    with pytest.warns(dispatch.FaultWarning, match="'bwd'.*backward kernel wrote into its input"):
        (grad,) = torch.autograd.grad(y, x, g)
    assert torch.equal(y.detach(), y_before) and torch.equal(g, g_before)
    torch.testing.assert_close(grad, torch.autograd.grad(torch.softmax(x, -1), x, g)[0])


@pytest.mark.parametrize("hook", [_raising, _wrong_shape, _too_many, _none],
                         ids=["raises", "wrong-shape", "too-many", "none-for-a-wanted-gradient"])
def test_a_broken_backward_kernel_is_a_fault_and_the_step_gets_the_references_gradients(hook):
    x, y = _served_by_bwd(hook)
    proj = torch.randn(4, 16)
    with pytest.warns(dispatch.FaultWarning, match="'bwd'.*backward kernel"):
        (grad,) = torch.autograd.grad((y * proj).sum(), x)
    torch.testing.assert_close(grad, torch.autograd.grad((torch.softmax(x, -1) * proj).sum(), x)[0])
    # quarantined for the key: the next step is served by another backend, whose backward works
    y = dispatch.softmax(x, -1)
    assert dispatch.explain("softmax", x, -1).decision.backend != "bwd"
    torch.testing.assert_close(torch.autograd.grad((y * proj).sum(), x)[0], grad)


def test_a_backward_hook_that_answers_no_callable_is_named_as_its_fault():
    _with_backward(lambda op, spec: 5)
    x = torch.randn(4, 16, requires_grad=True)
    with pytest.warns(dispatch.FaultWarning, match="dispatch_backward"):
        y = dispatch.softmax(x, -1)
    torch.testing.assert_close(y, torch.softmax(x, -1))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the Triton interpreter runs on CPU-only machines")
@pytest.mark.parametrize("layout", ["dense", "rows sliced from wider ones", "transposed"])
def test_a_negated_view_gets_the_right_sign_on_every_call_of_a_raw_memory_kernel(layout):
    wide = torch.randn(64, 96)
    y = {"dense": wide[:4, :64], "rows sliced from wider ones": wide[:4, :64],
         "transposed": wide[:64, :4].t()}[layout]
    if layout == "dense":
        y = y.contiguous()
    x = torch._neg_view(y)  # what z.conj().imag gives: a view whose values are read negated
    assert x.is_neg()
    for _ in range(3):  # the first call of a key is checked on a copy; the later ones are not
        torch.testing.assert_close(dispatch.softmax(x, -1, backend="triton"), torch.softmax(-y, -1))
    assert x.is_neg() and torch.equal(torch._neg_view(x), y)  # the user's view is untouched


def test_a_tune_space_hook_that_raises_is_said_and_strict_mode_refuses_the_fallback():
    plugin = chunked_backend.make("spaceless", priority=500)

    def dispatch_tune_space(op, spec):
        raise ZeroDivisionError("no space")

    plugin.dispatch_tune_space = dispatch.hookimpl(dispatch_tune_space)
    dispatch.register(plugin)
    x = torch.randn(4, 16)
    with pytest.warns(dispatch.FaultWarning, match="'spaceless'.*ZeroDivisionError"):
        torch.testing.assert_close(dispatch.softmax(x, -1), torch.softmax(x, -1))
    dispatch.configure(strict=True)
    with pytest.raises(dispatch.BackendFaultError, match="'spaceless'.*strict"):
        dispatch.softmax(torch.randn(5, 16), -1)


def test_a_kernel_that_returns_a_tensor_requiring_grad_is_quarantined():
    # torch's result of a call autograd doesn't record does not require grad; one whose kernel
    # handed back a Parameter would grow a graph in the user's code
    dispatch.register(chunked_backend.with_kernel(chunked_backend.make("marks", priority=500),
                                                  lambda run, config: lambda x: torch.nn.Parameter(run(x))))
    x = torch.randn(4, 16)
    with pytest.warns(dispatch.FaultWarning, match="'marks' returned a tensor that requires grad"):
        y = dispatch.softmax(x, -1)
    assert not y.requires_grad and not isinstance(y, torch.nn.Parameter)
    torch.testing.assert_close(y, torch.softmax(x, -1))


@pytest.mark.parametrize("make,what", [
    (lambda y: y.to("meta"), "on meta, not on the input's device cpu"),
    (lambda y: y.to_sparse(), "layout torch.sparse_coo, not a strided one"),
], ids=["meta", "sparse"])
def test_a_kernel_that_returns_a_meta_or_sparse_tensor_is_quarantined(make, what):
    dispatch.register(chunked_backend.with_kernel(chunked_backend.make("elsewhere", priority=500),
                                                  lambda run, config: lambda x: make(run(x))))
    x = torch.randn(4, 16)
    with pytest.warns(dispatch.FaultWarning, match=f"'elsewhere' .*returned a tensor.*{what}"):
        y = dispatch.softmax(x, -1)
    torch.testing.assert_close(y, torch.softmax(x, -1))
    torch.testing.assert_close(dispatch.softmax(x, -1), torch.softmax(x, -1))  # the next backend serves it


def _in_a_thread(fn, timeout=120):
    """``fn()``'s result or exception, from a daemon thread; fails the test if it has not returned."""
    done: dict = {}

    def run():
        try:
            done["result"] = fn()
        except BaseException as exc:  # reported to the caller
            done["error"] = exc

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(timeout)
    assert not thread.is_alive(), "the call hung: it waited on a lock its own thread holds"
    return done, caught


@pytest.mark.parametrize("autotune", [False, True], ids=["checked", "raced"])
def test_a_kernel_that_calls_its_own_call_again_is_a_fault_not_a_hang(autotune):
    plugin = chunked_backend.make("loops", priority=500)

    @dispatch.hookimpl
    def dispatch_kernel(op, spec, config):
        return lambda x: dispatch.softmax(x, -1)  # "let dispatch serve it": this very call, being resolved

    plugin.dispatch_kernel = dispatch_kernel
    dispatch.register(plugin)
    dispatch.configure(autotune=autotune)
    x = torch.randn(4, 16)
    done, caught = _in_a_thread(lambda: dispatch.softmax(x, -1))
    assert "error" not in done, done.get("error")
    torch.testing.assert_close(done["result"], torch.softmax(x, -1))
    assert dispatch.explain("softmax", x, -1).decision.backend != "loops"
    if not autotune:  # (a race drops the candidate and notes why in explain)
        assert any("called again from within its own resolution" in str(w.message) for w in caught)
