"""The call key: the native one (C++, built against this torch) and the Python one tell calls apart
alike, and op functions behave the same on either."""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import sys

import pytest
import torch

import dispatch
from dispatch import _native
from dispatch._dispatcher import DISPATCHER


class Marked(torch.Tensor):
    """A tensor subclass (keys must keep its calls apart from plain tensors')."""


def python_tensor_key(t: torch.Tensor) -> tuple:
    """What the Python key reads of one tensor."""
    return t.__class__, t.dtype, t.device, t.shape, t.stride(), t.requires_grad and torch.is_grad_enabled()


def corpus() -> list[torch.Tensor]:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    tensors = [base, base.clone(), base.t(), base[:, :3], base[:2], base.reshape(6, 4), base.reshape(24),
               base.to(torch.bfloat16), base.to(torch.int64), base.to("meta"), torch.empty(0, 6),
               torch.tensor(3.0), base.as_subclass(Marked), torch.nn.Parameter(base.clone()),
               base.clone().requires_grad_(), base.unsqueeze(0), base[None, :, None],
               torch.empty_strided((4, 6), (1, 4)), torch.empty_strided((4, 6), (6, 1), dtype=torch.float64)]
    return tensors


native = pytest.mark.skipif(_native.tensor_key() is None, reason=f"no native call key: {_native.status()}")


@native
@pytest.mark.parametrize("grad", [True, False])
def test_the_native_key_tells_tensors_apart_exactly_as_the_python_key_does(grad):
    key = _native.tensor_key()
    with torch.set_grad_enabled(grad):
        tensors = corpus()
        for a, b in itertools.combinations_with_replacement(tensors, 2):
            same_python = python_tensor_key(a) == python_tensor_key(b)
            assert (key(a) == key(b)) == same_python, (a.shape, a.stride(), b.shape, b.stride())
            if same_python:
                assert hash(key(a)) == hash(key(b))


@native
def test_the_native_key_hands_back_one_object_per_facts_and_stays_exact_past_its_table():
    key = _native.tensor_key()
    a, b = torch.empty(3, 5), torch.empty(3, 5)
    assert key(a) is key(b)  # the same facts: the object made before (its hash computed once)
    firsts = [key(torch.empty(i, 7)) for i in range(1, 600)]  # more shapes than the table holds
    agains = [key(torch.empty(i, 7)) for i in range(1, 600)]
    assert firsts == agains and len(set(firsts)) == 599
    assert key(a) == key(torch.empty(3, 5)) != key(torch.empty(5, 3))
    assert key(a) != key(torch.empty(3, 5, dtype=torch.float64)) != key(torch.empty(3, 5).t().t().as_subclass(Marked))


@native
def test_the_native_key_refuses_what_it_cannot_key_and_the_call_gets_torchs_own_error():
    key = _native.tensor_key()
    with pytest.raises(TypeError, match="expected a tensor"):
        key([1.0, 2.0])
    sparse = torch.eye(3).to_sparse()
    with pytest.raises(RuntimeError, match="no strides"):
        key(sparse)
    with pytest.raises(NotImplementedError) as theirs:
        torch.softmax(sparse, -1)
    with pytest.raises(NotImplementedError) as ours:
        dispatch.softmax(sparse, -1)
    assert str(ours.value).splitlines()[0] == str(theirs.value).splitlines()[0]


@native
def test_the_native_key_keys_negated_and_conjugated_views_apart():
    key = _native.tensor_key()
    y = torch.randn(4, 6)
    assert key(torch._neg_view(y)) != key(y) == key(y.clone())
    z = torch.randn(4, 6, dtype=torch.complex64)
    assert len({key(z), key(z.conj()), key(torch._neg_view(z))}) == 3


@pytest.fixture(params=["native", "python"])
def call_key(request):
    """Op functions made afresh with one key or the other."""
    if request.param == "native" and _native.tensor_key() is None:
        pytest.skip(f"no native call key: {_native.status()}")
    saved = dict(DISPATCHER.functions)
    DISPATCHER.functions.clear()
    with _native.python_key() if request.param == "python" else contextlib.nullcontext():
        yield request.param
    DISPATCHER.functions.clear()
    DISPATCHER.functions.update(saved)


def _op(name: str):
    """``dispatch.<name>`` as the ``call_key`` fixture made it (``dispatch.softmax`` itself was made
    at import, with the process's key)."""
    return DISPATCHER.function(name).function


def test_op_functions_use_the_key_they_were_made_with(call_key):
    assert dispatch._dispatcher.DISPATCHER.function("softmax").native is (call_key == "native")


def test_calls_that_differ_in_any_keyed_fact_resolve_apart_and_are_right(call_key):
    table = DISPATCHER.tables.setdefault("softmax", {})
    x = torch.randn(4, 6)
    calls = [x, x.clone(), x.t(), x[:, :3], x.to(torch.float64), x.as_subclass(Marked)]
    for t in calls:
        torch.testing.assert_close(_op("softmax")(t, -1), torch.softmax(t, -1))
    assert len(table) == 5  # x and its clone share a key
    before = len(table)
    torch.testing.assert_close(_op("softmax")(x, 1), torch.softmax(x, 1))  # dim 1 is not dim -1
    assert len(table) == before + 1


def test_a_call_autograd_records_is_keyed_apart_and_gets_a_gradient(call_key):
    table = DISPATCHER.tables.setdefault("softmax", {})
    x = torch.randn(3, 5)
    w = x.clone().requires_grad_()
    _op("softmax")(x, -1)
    with torch.no_grad():
        assert _op("softmax")(w, -1).grad_fn is None
    assert len(table) == 1  # under no_grad, w's call is x's
    y = _op("softmax")(w, -1)
    assert y.grad_fn is not None and len(table) == 2
    g, v = torch.randn(3, 5), x.clone().requires_grad_()
    (y * g).sum().backward()
    (torch.softmax(v, -1) * g).sum().backward()
    torch.testing.assert_close(w.grad, v.grad)


def test_a_norm_with_an_absent_optional_weight_is_keyed_apart_from_one_with_it(call_key):
    table = DISPATCHER.tables.setdefault("rms_norm", {})
    x, w = torch.randn(4, 8), torch.rand(8)
    torch.testing.assert_close(_op("rms_norm")(x, [8]), torch.nn.functional.rms_norm(x, [8]))
    torch.testing.assert_close(_op("rms_norm")(x, [8], w), torch.nn.functional.rms_norm(x, [8], w))
    assert len(table) == 2


def test_a_float_dim_after_a_resolved_int_dim_raises_torchs_error(call_key):
    x = torch.randn(2, 3)
    _op("softmax")(x, 1)
    with pytest.raises(TypeError):
        _op("softmax")(x, 1.0)


def test_a_build_that_fails_is_reported_once_recorded_and_not_tried_again(tmp_path, monkeypatch):
    monkeypatch.setenv("DISPATCH_NATIVE_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", "false")  # a compiler that always fails
    monkeypatch.delenv("DISPATCH_NATIVE", raising=False)
    with pytest.warns(_native.NativeWarning, match="exited with 1"):
        fn, why = _native._load()
    assert fn is None and why.startswith("python (")
    failed = list(tmp_path.glob("*/build.failed"))
    assert len(failed) == 1 and failed[0].read_text().startswith("false ")
    monkeypatch.setenv("CXX", "c++")
    with pytest.warns(_native.NativeWarning, match="an earlier build failed"):
        fn, why = _native._load()
    assert fn is None and str(failed[0]) in why


def test_native_off_and_load_never_build(tmp_path, monkeypatch):
    monkeypatch.setenv("DISPATCH_NATIVE_DIR", str(tmp_path))
    monkeypatch.setenv("DISPATCH_NATIVE", "off")
    assert _native._load() == (None, "python (DISPATCH_NATIVE=off)")
    monkeypatch.setenv("DISPATCH_NATIVE", "load")
    fn, why = _native._load()
    assert fn is None and "never builds" in why
    assert not list(tmp_path.glob("*/*.so"))


def test_a_bad_native_setting_names_what_would_work(monkeypatch):
    monkeypatch.setenv("DISPATCH_NATIVE", "fast")
    with pytest.warns(_native.NativeWarning, match="expected one of auto, load, off"):
        fn, _ = _native._load()
    assert fn is None


def test_a_process_with_the_native_key_off_gets_the_same_results():
    code = ("import torch, dispatch; from dispatch import _native; x = torch.randn(3, 7); "
            "assert torch.equal(dispatch.softmax(x, 0), torch.softmax(x, 0)); print(_native.status())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "DISPATCH_NATIVE": "off"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "python (DISPATCH_NATIVE=off)"


def test_the_native_key_is_built_where_a_compiler_and_the_headers_exist(tmp_path):
    try:
        _native.compile_command(tmp_path / "probe.so")
    except RuntimeError as exc:
        pytest.skip(f"cannot build here: {exc}")
    if _native.mode() == "off":
        pytest.skip("DISPATCH_NATIVE=off")
    assert _native.tensor_key() is not None, _native.status()
    assert _native.status().startswith("native (")


@native
def test_python_key_op_serves_the_same_calls_with_the_key_computed_in_python():
    from dispatch.backend import python_key_op

    op = python_key_op("softmax")
    x = torch.randn(5, 9)
    torch.testing.assert_close(op(x, -1), torch.softmax(x, -1))
    torch.testing.assert_close(dispatch.softmax(x, -1), torch.softmax(x, -1))
    keys = DISPATCHER.tables["softmax"]
    assert sorted(type(k[0]).__name__ for k in keys) == ["_TensorMeta", "bytes"]  # one resolved call per key
    assert DISPATCHER.function("softmax").native  # the process's own op function keeps the native key


def test_processes_started_together_build_the_native_key_once(tmp_path):
    try:
        _native.compile_command(tmp_path / "probe.so")
    except RuntimeError as exc:
        pytest.skip(f"cannot build here: {exc}")
    code = ("import torch, dispatch; from dispatch import _native; x = torch.randn(3, 7); "
            "assert torch.equal(dispatch.softmax(x, -1), torch.softmax(x, -1)); print(_native.status())")
    env = {**os.environ, "DISPATCH_NATIVE_DIR": str(tmp_path / "native"), "DISPATCH_NATIVE": "auto"}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    assert all(out.strip().startswith("native (") for out, _ in outs), outs
    assert sum(err.count("dispatch: building its native call key") for _, err in outs) == 1
    assert len(list((tmp_path / "native").glob("*/*.so"))) == 1


def test_a_negated_view_called_after_a_tensor_of_the_same_facts_gets_its_sign(call_key):
    """A kernel that reads raw memory is resolved for a plain tensor first; a negated view of the
    same shape, strides and dtype must not be served as if it were plain, whichever key the call
    got, however the calls alternate."""
    import chunked_backend

    dispatch.register(chunked_backend.make("raw", fault="raw memory"))
    softmax = _op("softmax")
    y = torch.randn(4, 64)
    x = torch._neg_view(y.clone())  # reads as -y
    for _ in range(2):
        torch.testing.assert_close(softmax(y, -1, backend="raw"), torch.softmax(y, -1))
        torch.testing.assert_close(softmax(x, -1, backend="raw"), torch.softmax(-y, -1))
    assert x.is_neg() and torch.equal(torch._neg_view(x), y)  # the user's view is untouched
