"""The ops behave exactly like torch's: values, shapes, dtypes, layouts and the errors raised."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import dispatch

from op_packages import op_package

FLOATS = [torch.float64, torch.float32, torch.float16, torch.bfloat16]


def _x(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 3).to(dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dim", [0, 1, -1, -2, 2])
def test_softmax_family_matches_torch_every_dim_and_dtype(op, dtype, dim):
    x = _x((3, 5, 7), dtype)
    got = getattr(dispatch, op)(x, dim)
    want = getattr(torch, op)(x, dim)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_dtype_cast_is_honoured(op):
    x = _x((4, 9), torch.float16)
    got = getattr(dispatch, op)(x, -1, dtype=torch.float32)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, getattr(torch, op)(x, -1, dtype=torch.float32))


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_a_python_type_as_dtype_is_read_as_torch_reads_it(op):
    x = _x((4, 9), torch.float32)
    got = getattr(dispatch, op)(x, -1, dtype=float)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, getattr(torch, op)(x, -1, dtype=float))
    for bad in (int, complex):  # types torch refuses for these ops: its exception
        torch_err = _raised(lambda: getattr(torch, op)(x, -1, dtype=bad))
        assert torch_err is not None and _raised(lambda: getattr(dispatch, op)(x, -1, dtype=bad))[0] is torch_err[0]


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_non_contiguous_and_transposed_inputs(op):
    base = _x((6, 10))
    for x in (base.t(), base[:, ::2], base[1:, 3:8], base.t()[::2]):
        torch.testing.assert_close(getattr(dispatch, op)(x, -1), getattr(torch, op)(x, -1))
        torch.testing.assert_close(getattr(dispatch, op)(x, 0), getattr(torch, op)(x, 0))


@pytest.mark.parametrize("dim,keepdim", [(0, False), (1, True), (-1, False), ((0, 2), False), ([1, 2], True),
                                         ((), True), ([], True)])  # (no dim, keepdim: torch reduces every dim)
@pytest.mark.parametrize("dtype", FLOATS)
def test_logsumexp_matches_torch(dim, keepdim, dtype):
    x = _x((2, 3, 4), dtype)
    got = dispatch.logsumexp(x, dim, keepdim)
    want = torch.logsumexp(x, dim, keepdim)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want)


def test_zero_dim_tensors():
    s = torch.tensor(2.5)
    torch.testing.assert_close(dispatch.softmax(s, 0), torch.softmax(s, 0))
    torch.testing.assert_close(dispatch.log_softmax(s, -1), torch.log_softmax(s, -1))
    torch.testing.assert_close(dispatch.logsumexp(s, 0), torch.logsumexp(s, 0))


@pytest.mark.parametrize("shape,dim", [((0, 5), -1), ((5, 0), -1), ((0,), 0), ((2, 0, 3), 1)])
def test_empty_tensors(shape, dim):
    x = torch.empty(shape)
    for op in ("softmax", "log_softmax"):
        got, want = getattr(dispatch, op)(x, dim), getattr(torch, op)(x, dim)
        assert got.shape == want.shape
    torch.testing.assert_close(dispatch.logsumexp(x, dim), torch.logsumexp(x, dim))


def test_nan_and_inf_propagate_like_torch():
    x = torch.tensor([[1.0, float("nan"), 2.0], [float("-inf")] * 3, [float("inf"), 1.0, 2.0], [0.0, 1.0, 2.0]])
    for op in ("softmax", "log_softmax"):
        torch.testing.assert_close(getattr(dispatch, op)(x, -1), getattr(torch, op)(x, -1), equal_nan=True)
    torch.testing.assert_close(dispatch.logsumexp(x, -1), torch.logsumexp(x, -1), equal_nan=True)


def _raised(fn):
    try:
        fn()
    except Exception as exc:  # the point is to compare what was raised
        return type(exc), str(exc)
    return None


@pytest.mark.parametrize("call", [
    lambda m: m.softmax(torch.ones(2, 3), 2),
    lambda m: m.softmax(torch.ones(2, 3), -3),
    lambda m: m.log_softmax(torch.ones(()), 1),
    lambda m: m.logsumexp(torch.ones(2, 3), 5),
    lambda m: m.logsumexp(torch.ones(2, 3), (0, 0)),
    lambda m: m.logsumexp(torch.ones(2, 3), ()),
    lambda m: m.softmax(torch.ones(2, 3, dtype=torch.int64), -1),
    lambda m: m.softmax([1.0, 2.0], 0),
    lambda m: m.softmax(torch.ones(2), "x"),
    lambda m: m.softmax(torch.ones(2, 3).to_sparse_csr(), 1),
    lambda m: m.log_softmax(torch.ones(2, 3).to_sparse_csr(), -1),
    lambda m: m.logsumexp(torch.ones(2, 3).to_sparse_csr(), 1),
    lambda m: m.softmax(torch.ones(2, 3).to_sparse(), 1),
    lambda m: m.logsumexp(torch.ones(2, 3).to_sparse(), 1),
], ids=["dim-high", "dim-low", "scalar-dim", "lse-dim", "lse-dup", "lse-no-dim", "int-input", "list-input", "str-dim",
        "csr-softmax", "csr-log_softmax", "csr-logsumexp", "coo-softmax", "coo-logsumexp"])
def test_bad_input_raises_torchs_exception_type(call):
    torch_err = _raised(lambda: call(torch))
    ours = _raised(lambda: call(dispatch))
    assert torch_err is not None, "the case must be an error in torch"
    assert ours is not None and ours[0] is torch_err[0], (ours, torch_err)


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
@pytest.mark.parametrize("call,torch_call", [
    (lambda **kw: dispatch.softmax(torch.arange(8).reshape(2, 4), -1, **kw),
     lambda: torch.softmax(torch.arange(8).reshape(2, 4), -1)),
    (lambda **kw: dispatch.log_softmax(torch.ones(2, 4), -1, dtype=torch.int64, **kw),
     lambda: torch.log_softmax(torch.ones(2, 4), -1, dtype=torch.int64)),
    (lambda **kw: dispatch.layer_norm(torch.ones(2, 8), [8], torch.ones(8, dtype=torch.float64), **kw),
     lambda: torch.nn.functional.layer_norm(torch.ones(2, 8), [8], torch.ones(8, dtype=torch.float64))),
], ids=["int-input", "int-dtype", "float64-weight"])
def test_a_forced_backend_on_a_call_torch_refuses_raises_torchs_error(backend, call, torch_call):
    # the backend refuses it, and only torch's op would take it: torch's own error, as without backend=
    if backend not in dispatch.backends():
        pytest.skip(f"{backend} not loaded")
    torch_err = _raised(torch_call)
    assert torch_err is not None
    assert _raised(call)[0] is torch_err[0]
    ours = _raised(lambda: call(backend=backend))
    assert ours is not None and ours[0] is torch_err[0], (ours, torch_err)
    # a call only the reference serves, which torch does take: the refusal stands, naming the backend
    with pytest.raises(dispatch.BackendRefusedError, match=f"backend '{backend}' was forced"):
        dispatch.softmax(torch.ones(2, 4, dtype=torch.float64), -1, backend=backend)


def test_integer_input_with_float_dtype_cast_works_like_torch():
    x = torch.arange(6).reshape(2, 3)
    torch.testing.assert_close(dispatch.softmax(x, -1, dtype=torch.float32), torch.softmax(x, -1, dtype=torch.float32))


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.bool])
def test_logsumexp_of_integers_and_bools_is_in_torchs_default_dtype(dtype):
    x = torch.arange(24).reshape(4, 6).remainder(5).to(dtype)
    for dim, keepdim in ((1, False), (0, True), ((0, 1), False)):
        want = torch.logsumexp(x, dim, keepdim)
        got = dispatch.logsumexp(x, dim, keepdim)
        assert got.dtype == want.dtype == torch.get_default_dtype() and got.shape == want.shape
        torch.testing.assert_close(got, want)
    out = torch.empty(4)
    assert dispatch.logsumexp(x, 1, out=out) is out
    torch.testing.assert_close(out, torch.logsumexp(x, 1))
    torch.testing.assert_close(dispatch.logsumexp(x[0, 0], 0), torch.logsumexp(x[0, 0], 0))  # 0-d
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert dispatch.logsumexp(x, 1).dtype == torch.logsumexp(x, 1).dtype == torch.float64
    finally:
        torch.set_default_dtype(old)


def test_a_dim_tensor_is_taken_where_torch_takes_it():
    x = torch.randn(2, 3)
    for op in ("softmax", "log_softmax"):  # a 0-d tensor is an int to torch; a 1-element one is not
        torch.testing.assert_close(getattr(dispatch, op)(x, torch.tensor(1)), getattr(torch, op)(x, 1))
        with pytest.raises(TypeError) as by_torch:  # (its message differs from one torch to another)
            getattr(torch, op)(x, torch.tensor([1]))
        with pytest.raises(TypeError) as ours:
            getattr(dispatch, op)(x, torch.tensor([1]))
        assert str(ours.value) == str(by_torch.value)
        for dim in (torch.tensor(True), np.array(1), np.int64(1), torch.tensor(1.0)):  # refused or taken, as by torch
            try:
                want = getattr(torch, op)(x, dim)
            except TypeError:
                with pytest.raises(TypeError):
                    getattr(dispatch, op)(x, dim)
            else:
                torch.testing.assert_close(getattr(dispatch, op)(x, dim), want)
    torch.testing.assert_close(dispatch.logsumexp(x, torch.tensor([1])), torch.logsumexp(x, torch.tensor([1])))


ALIAS_CALLS = [  # (op, args after the input, kwargs): numpy's names, which torch's functions take too
    ("softmax", (), {"axis": 0}), ("log_softmax", (), {"axis": 0, "dtype": torch.float32}),
    ("logsumexp", (), {"axis": 0}), ("logsumexp", (), {"axis": (0, 1)}),
    ("logsumexp", (), {"axis": 1, "keepdims": True}),
    ("logsumexp", (0,), {"keepdims": True}), ("logsumexp", (), {"dim": 1, "keepdims": True}),
    ("logsumexp", (), {"axis": 1, "keepdim": True})]


@pytest.mark.parametrize("backend", [None, "torch", "tilelang"])
@pytest.mark.parametrize("op,args,kwargs", ALIAS_CALLS, ids=lambda v: str(v) if isinstance(v, dict) else None)
def test_numpys_axis_and_keepdims_are_taken_where_torch_takes_them(op, args, kwargs, backend):
    x = _x((4, 6))
    if backend == "tilelang" and not dispatch.backends()["tilelang"].available:
        pytest.skip("TileLang is not installed")
    want = getattr(torch, op)(x, *args, **kwargs)
    torch.testing.assert_close(getattr(dispatch, op)(x, *args, **kwargs, backend=backend), want)
    # a call is served by its dims as read, not by the names given: a plain call next gets its own result
    # (softmax's default dim included), and the call again its own
    torch.testing.assert_close(getattr(dispatch, op)(x, -1, backend=backend), getattr(torch, op)(x, -1))
    if op != "logsumexp":
        torch.testing.assert_close(getattr(dispatch, op)(x, backend=backend), getattr(torch, op)(x, -1))
    torch.testing.assert_close(getattr(dispatch, op)(x, *args, **kwargs, backend=backend), want)
    out = torch.empty_like(want)
    assert getattr(dispatch, op)(x, *args, **kwargs, out=out) is out
    torch.testing.assert_close(out, want)


@pytest.mark.parametrize("call", [
    lambda m, x: m.logsumexp(x, 0, axis=1), lambda m, x: m.logsumexp(x, dim=0, axis=1),
    lambda m, x: m.logsumexp(x, 0, keepdim=True, keepdims=True), lambda m, x: m.softmax(x, 0, axis=1),
    lambda m, x: m.log_softmax(x, 0, axis=1), lambda m, x: m.logsumexp(x), lambda m, x: m.logsumexp(x, keepdims=True),
    lambda m, x: m.softmax(x, axis=5), lambda m, x: m.logsumexp(x, axis=[0, 0]), lambda m, x: m.softmax(x, axis="0")])
def test_an_alias_given_with_its_parameter_or_a_bad_one_raises_torchs_exception_type(call):
    x = _x((4, 6))
    with pytest.raises(Exception) as by_torch:
        call(torch, x)
    with pytest.raises(type(by_torch.value)):
        call(dispatch, x)


def test_a_packages_op_declares_aliases_and_every_entry_point_takes_them():
    from dispatch.backend import OpDecl, TensorArg

    # an alias for a required parameter followed by another required one: both may be given by name
    decl = OpDecl(name="affine_rows", parse=lambda input, scale, shift, flip=False: {"scale": scale, "shift": shift,
                                                                                     "flip": flip},
                  tensors=(TensorArg("input"),), aliases={"factor": "scale", "reverse": "flip"},
                  reference=lambda spec: lambda input: (input * spec.scale + spec.shift).flip(-1) if spec.flip
                  else input * spec.scale + spec.shift,
                  output=lambda spec: (spec.shape, spec.dtype))
    dispatch.register(op_package(decl), name="affine_rows_ops")
    try:
        x = _x((2, 3))
        torch.testing.assert_close(dispatch.affine_rows(x, factor=2.0, shift=1.0), x * 2 + 1)
        torch.testing.assert_close(dispatch.affine_rows(x, 3.0, 0.5), x * 3 + 0.5)
        torch.testing.assert_close(dispatch.affine_rows(x, 2.0, 1.0, reverse=True), (x * 2 + 1).flip(-1))
        with pytest.raises(TypeError, match=r"affine_rows\(\) missing required argument 'shift'"):
            dispatch.affine_rows(x, factor=2.0)
        with pytest.raises(TypeError, match="missing required argument 'scale'"):
            dispatch.affine_rows(x)
        with pytest.raises(TypeError, match="got both 'scale' and its alias 'factor'"):
            dispatch.affine_rows(x, 2.0, 1.0, factor=2.0)
        assert "affine_rows(2x3 float32" in str(dispatch.explain("affine_rows", x, factor=2.0, shift=1.0))
    finally:
        dispatch.unregister("affine_rows_ops")


@pytest.mark.parametrize("aliases,said", [
    ({"x": "input"}, "must stand for a parameter of 'parse' that is not a tensor"),
    ({"factor": "nothing"}, "must stand for a parameter of 'parse' that is not a tensor"),
    ({"scale": "scale"}, "must be an identifier that is not a Python keyword, a parameter"),
    ({"backend": "scale"}, "must be an identifier"), ({"lambda": "scale"}, "must be an identifier"),
    ({"factor": 1}, "'aliases' must map other keyword names to parameters")])
def test_aliases_that_could_not_be_called_are_refused_at_the_declaration(aliases, said):
    with pytest.raises((ValueError, TypeError), match=said):
        _rowsum(parse=lambda input, scale=1.0: {}, aliases=aliases)


@pytest.mark.parametrize("dim", [(True, 0), (True,), (0, True), True, [0, True], (0, 1.0), (1, -1), (0, "1")],
                         ids=str)
def test_logsumexp_takes_or_refuses_each_dim_form_as_torch_does(dim):
    x = torch.randn(4, 8)
    try:
        want = torch.logsumexp(x, dim)
    except Exception as exc:  # torch refuses it: the same exception type
        with pytest.raises(type(exc)):
            dispatch.logsumexp(x, dim)
    else:
        torch.testing.assert_close(dispatch.logsumexp(x, dim), want)


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0,)], ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("backend", [None, "torch", "triton", "tilelang"])
def test_logsumexp_over_no_dims_of_an_empty_input_reduces_every_dim_as_torch_does(shape, keepdim, backend):
    # torch: dim=() reduces every dim; without keepdim it refuses a non-empty input, and gives -inf for an empty one
    x = torch.empty(shape)
    if backend is not None:
        verdicts = {c.name: c.verdict for c in dispatch.explain("logsumexp", x, (), keepdim).decision.candidates}
        if backend not in verdicts or not verdicts[backend].ok:
            pytest.skip(f"{backend} does not serve it here: {verdicts.get(backend)}")
    want = torch.logsumexp(x, (), keepdim=keepdim)
    got = dispatch.logsumexp(x, (), keepdim=keepdim, backend=backend)
    assert got.shape == want.shape and torch.equal(got, want), (got, want)
    out = torch.empty(0)
    dispatch.logsumexp(x, [], keepdim=keepdim, out=out)
    assert torch.equal(out, want)


class _Wrapped:
    """Not a tensor: an object that overrides torch's functions, as a tensor-like library's type does."""

    def __init__(self, t):
        self.t = t

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        def unwrap(v):
            return v.t if isinstance(v, _Wrapped) else v

        kwargs = {k: unwrap(v) for k, v in (kwargs or {}).items()}
        return _Wrapped(func(*map(unwrap, args), **kwargs))


@pytest.mark.parametrize("op,args", [("softmax", (1,)), ("logsumexp", (1,)), ("layer_norm", ([8],))])
def test_an_object_overriding_torchs_functions_gets_the_call_as_from_torch(op, args):
    x = _x((4, 8))
    torch_fn = getattr(torch.nn.functional if op == "layer_norm" else torch, op)
    want = torch_fn(_Wrapped(x), *args)
    got = getattr(dispatch, op)(_Wrapped(x), *args)
    assert isinstance(want, _Wrapped) and isinstance(got, _Wrapped)
    torch.testing.assert_close(got.t, want.t)
    if op == "logsumexp":  # out= too: the object's override is handed the whole call, out included
        out = torch.empty(0)
        got = dispatch.logsumexp(_Wrapped(x), 1, out=out)
        assert isinstance(got, _Wrapped) and got.t is out
        torch.testing.assert_close(out, torch.logsumexp(x, 1))


def test_backend_keyword_must_be_a_name():
    with pytest.raises(TypeError, match="'backend' must be a backend name"):
        dispatch.softmax(torch.ones(2, 2), -1, backend=3)


# -- out= ---------------------------------------------------------------------------------------------

OUT_CALLS = {
    "softmax": lambda m, x, **kw: m.softmax(x, 1, **kw),
    "log_softmax": lambda m, x, **kw: m.log_softmax(x, 1, **kw),
    "logsumexp": lambda m, x, **kw: m.logsumexp(x, 1, **kw),
}


@pytest.mark.parametrize("op", OUT_CALLS)
@pytest.mark.parametrize("start", [(0,), (3,), "right"], ids=["empty", "wrong-shape", "right-shape"])
def test_out_receives_the_result_and_is_returned_like_torch(op, start):
    import warnings

    x = _x((3, 7))
    want = OUT_CALLS[op](torch, x)
    out = torch.full(want.shape if start == "right" else start, 5.0)
    ours_out = out.clone()
    with warnings.catch_warnings(record=True) as torch_warned:
        warnings.simplefilter("always")
        OUT_CALLS[op](torch, x, out=out)
    with warnings.catch_warnings(record=True) as we_warned:
        warnings.simplefilter("always")
        got = OUT_CALLS[op](dispatch, x, out=ours_out)
    assert got is ours_out
    torch.testing.assert_close(ours_out, out)
    assert [type(w.message) for w in we_warned] == [type(w.message) for w in torch_warned]
    torch.testing.assert_close(x, _x((3, 7)))  # the input is untouched


@pytest.mark.parametrize("call", [
    lambda m: m.softmax(torch.ones(2, 3), 1, out=torch.empty(0, dtype=torch.float64)),
    lambda m: m.log_softmax(torch.ones(2, 3), 1, torch.float64, out=torch.empty(0)),
    lambda m: m.logsumexp(torch.ones(2, 3), 1, out=torch.empty(0, dtype=torch.int64)),
    lambda m: m.logsumexp(torch.ones(2, 3, requires_grad=True), 1, out=torch.empty(0)),
    lambda m: m.softmax(torch.ones(2, 3), 1, out=5),
    lambda m: m.softmax(torch.ones(2, 3), 4, out=torch.empty(0)),
    lambda m: m.logsumexp(torch.ones(2, 3), 1, out=torch.empty(0, dtype=torch.bool)),
    lambda m: m.softmax(torch.ones(2, 3), 1, out=torch.empty(0, requires_grad=True)),
    lambda m: m.logsumexp(torch.ones(2, 3), 1, out=torch.empty(0, requires_grad=True)),
    lambda m: m.softmax(torch.ones(2, 3, dtype=torch.int64), 1, out=torch.empty(0, dtype=torch.int64)),
], ids=["dtype", "cast-dtype", "lse-int-out", "lse-grad", "not-a-tensor", "bad-dim", "lse-bool-out",
        "out-requires-grad", "lse-out-requires-grad", "int-input"])
def test_out_that_torch_refuses_raises_torchs_exception_type(call):
    torch_err = _raised(lambda: call(torch))
    ours = _raised(lambda: call(dispatch))
    assert torch_err is not None, "the case must be an error in torch"
    assert ours is not None and ours[0] is torch_err[0], (ours, torch_err)


def test_logsumexp_out_of_another_float_dtype_gets_the_result_cast_like_torch():
    x = _x((4, 6))
    out, want = torch.empty(0, dtype=torch.float64), torch.empty(0, dtype=torch.float64)
    torch.logsumexp(x, 1, out=want)
    dispatch.logsumexp(x, 1, out=out)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, want)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_logsumexp_into_a_finer_out_is_as_precise_as_torchs(dtype):
    # torch sums into out: a float32 out of a half-precision input holds float32's digits
    x = torch.full((17,), 0.75, dtype=dtype)
    out, want = torch.empty(0), torch.empty(0)
    torch.logsumexp(x, 0, out=want)
    dispatch.logsumexp(x, 0, out=out)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(out, torch.logsumexp(x.double(), 0).float())


@pytest.mark.parametrize("out_dtype", [torch.complex64, torch.complex128])
def test_logsumexp_into_a_complex_out_holds_its_parts_precision(out_dtype):
    # torch sums a half-precision input into a complex out in the out's precision: not rounded to bfloat16
    x = (_x((4, 6)) * 5).to(torch.bfloat16)
    out, want = torch.empty(0, dtype=out_dtype), torch.empty(0, dtype=out_dtype)
    torch.logsumexp(x, 1, out=want)
    dispatch.logsumexp(x, 1, out=out)
    exact = torch.logsumexp(x.double(), 1)
    assert out.dtype == out_dtype and torch.equal(out.imag, torch.zeros(4, dtype=out.imag.dtype))
    torch.testing.assert_close(out.real.double(), exact, rtol=1.3e-6, atol=1e-5)  # fp32's, not bf16's 1e-2
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-3)


def test_a_forced_backend_refusing_a_finer_logsumexp_out_says_the_out_made_the_call_finer():
    # a bfloat16 input with a float64 out is computed in float64, as torch does: a backend that has no
    # float64 kernel refuses, and the message says why the call it names is float64 and what keeps bfloat16
    from dispatch.errors import BackendRefusedError

    x = _x((4, 6)).to(torch.bfloat16)
    def serves(t):
        return {c.name for c in dispatch.explain("logsumexp", t, 1).decision.candidates if c.verdict.ok}

    refusing = sorted(serves(x) - serves(x.double()))
    if not refusing:
        pytest.skip("no backend here serves a bfloat16 logsumexp and refuses a float64 one")
    name = refusing[0]
    with pytest.raises(BackendRefusedError, match=r"out= is float64, finer than the bfloat16 input") as caught:
        dispatch.logsumexp(x, 1, out=torch.empty(0, dtype=torch.float64), backend=name)
    assert "an out of bfloat16 keeps the input's dtype" in str(caught.value)
    out = torch.empty(0, dtype=torch.bfloat16)  # what the message offers: the backend serves it
    dispatch.logsumexp(x, 1, out=out, backend=name)
    torch.testing.assert_close(out, torch.logsumexp(x, 1))


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("x_dtype,out_dtype", [(torch.float32, torch.int32), (torch.int32, torch.float32),
                                               (torch.int32, torch.int64), (torch.float32, torch.float64)])
def test_an_out_of_the_wrong_dtype_suggests_only_calls_that_work(op, x_dtype, out_dtype):
    import re

    x = torch.arange(6).reshape(2, 3).to(x_dtype)
    out = torch.empty(2, 3, dtype=out_dtype)
    with pytest.raises(RuntimeError, match="'out' must have the result's dtype") as caught:
        getattr(dispatch, op)(x, 1, out=out)
    said = str(caught.value)
    ways = 0
    for d in re.findall(r"pass an out of torch\.(\w+)", said):  # each suggestion, taken: torch runs it
        getattr(torch, op)(x, 1, out=torch.empty(2, 3, dtype=getattr(torch, d)))
        ways += 1
    for d in re.findall(r"pass dtype=torch\.(\w+)", said):
        getattr(torch, op)(x, 1, dtype=getattr(torch, d), out=out)
        ways += 1
    assert ways or "computes in a floating point dtype" in said, said


def test_out_calls_are_served_by_the_chosen_backend():
    import chunked_backend

    calls = []
    dispatch.register(chunked_backend.make("chunked", calls=calls))
    x = _x((5, 9))
    out = torch.empty(5, 9)
    dispatch.softmax(x, -1, backend="chunked", out=out)
    assert calls and calls[-1] == "softmax"
    torch.testing.assert_close(out, torch.softmax(x, -1))


def test_out_is_fine_under_no_grad_as_in_torch():
    x = torch.randn(3, 4, requires_grad=True)
    out = torch.empty(0)
    with torch.no_grad():
        dispatch.logsumexp(x, 1, out=out)
    torch.testing.assert_close(out, torch.logsumexp(x.detach(), 1))


def test_out_of_a_packages_op_follows_its_output_rule_and_refuses_autograd():
    # an op whose result is float32 whatever the input's dtype (its output rule): out= takes that
    # dtype, refuses another, and refuses inputs that require grad, as torch's out= functions do
    from dispatch.backend import OpDecl, TensorArg

    decl = OpDecl(name="rowmax32", parse=lambda input: {}, tensors=(TensorArg("input"),), out=True,
                  reference=lambda spec: lambda input: input.amax(-1).float(),
                  output=lambda spec: (spec.shape[:-1], torch.float32))

    dispatch.register(op_package(decl), name="rowmax32_ops")
    x = torch.randn(4, 8).half()
    out = torch.empty(4)
    assert dispatch.rowmax32(x, out=out) is out
    torch.testing.assert_close(out, x.amax(-1).float())
    with pytest.raises(RuntimeError, match=r"'out' must have the result's dtype torch.float32 \(got torch.float16\)"):
        dispatch.rowmax32(x, out=torch.empty(4, dtype=torch.float16))
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        dispatch.rowmax32(torch.randn(4, 8, requires_grad=True), out=torch.empty(4))
    with torch.no_grad():
        dispatch.rowmax32(torch.randn(4, 8, requires_grad=True), out=out)


def test_an_op_declared_anew_under_its_name_is_called_with_its_new_signature():
    from dispatch.backend import OpDecl, TensorArg

    first = OpDecl(name="scaled", parse=lambda input, scale: {"scale": scale}, tensors=(TensorArg("input"),),
                   reference=lambda spec: lambda input: input * spec.scale,
                   output=lambda spec: (spec.shape, spec.dtype))
    second = OpDecl(name="scaled", parse=lambda input, other, scale: {"scale": scale},
                    tensors=(TensorArg("input"), TensorArg("other")),
                    reference=lambda spec: lambda input, other: (input + other) * spec.scale,
                    output=lambda spec: (spec.shape, spec.dtype))
    x = torch.ones(2, 3)
    dispatch.register(op_package(first), name="scaled_ops")
    torch.testing.assert_close(dispatch.scaled(x, 2.0), x * 2)
    dispatch.unregister("scaled_ops")
    dispatch.register(op_package(second), name="scaled_ops")
    try:
        torch.testing.assert_close(dispatch.scaled(x, x, 2.0), x * 4)
    finally:
        dispatch.unregister("scaled_ops")


def test_a_spec_helper_an_op_cannot_answer_names_what_it_lacks():
    from dispatch.backend import OpDecl, TensorArg, spec_of

    decl = OpDecl(name="plus", parse=lambda input, other: {}, tensors=(TensorArg("input"), TensorArg("other")),
                  reference=lambda spec: lambda input, other: input + other,
                  output=lambda spec: (spec.shape, spec.dtype))

    dispatch.register(op_package(decl), name="plus_ops")
    try:
        spec = spec_of("plus", torch.ones(2, 3), torch.ones(2, 3))
        with pytest.raises(AttributeError, match="CallSpec.rows of 'plus': .*no attribute 'dims'"):
            spec.rows
        with pytest.raises(AttributeError, match="CallSpec of 'plus' has no attribute 'keepdim'"):
            spec.keepdim
    finally:
        dispatch.unregister("plus_ops")


def test_a_tensor_subclass_runs_torchs_op_keeping_its_class_and_overrides():
    class Tagged(torch.Tensor):
        pass

    class Overriding(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func is torch.softmax or func is torch.Tensor.softmax or func is torch.nn.functional.softmax:
                return torch.full(args[0].shape, 42.0)
            return super().__torch_function__(func, types, args, kwargs or {})

    x = torch.randn(3, 8)
    y = dispatch.softmax(x.as_subclass(Tagged), -1)
    assert type(y) is Tagged
    torch.testing.assert_close(y.as_subclass(torch.Tensor), torch.softmax(x, -1))
    assert (dispatch.softmax(x.as_subclass(Overriding), -1) == 42).all()
    with pytest.raises(dispatch.BackendRefusedError, match="Tensor subclass Tagged runs torch's own op"):
        dispatch.softmax(x.as_subclass(Tagged), -1, backend="triton")
    assert type(dispatch.softmax(x.as_subclass(Tagged), -1, backend="torch")) is Tagged
    assert type(dispatch.softmax(torch.nn.Parameter(x), -1)) is torch.Tensor  # as torch's


@pytest.mark.parametrize("name", ["configure", "explain", "tune", "ops"])
def test_an_op_named_like_dispatchs_own_api_is_refused(name):
    # dispatch.<name> would stay dispatch's function or module: the op could only be reached by
    # dispatch.op(name), so its declaration is refused, with the reason
    import attrs

    from dispatch.ops import SOFTMAX

    with pytest.raises(dispatch.PluginError, match=f"dispatch.{name} is dispatch.s own"):
        dispatch.register(op_package(attrs.evolve(SOFTMAX, name=name)), name="shadowing_ops")
    assert name not in dispatch.declared_ops()
    dispatch.register(op_package(attrs.evolve(SOFTMAX, name=f"{name}_rows")), name="shadowing_ops")  # rolled back
    try:
        torch.testing.assert_close(getattr(dispatch, f"{name}_rows")(torch.ones(2, 4), -1), torch.full((2, 4), 0.25))
    finally:
        dispatch.unregister("shadowing_ops")


def _rowsum(name: str = "rowsum", **fields):
    from dispatch.backend import OpDecl, TensorArg

    return OpDecl(**{"name": name, "parse": lambda input: {}, "tensors": (TensorArg("input"),),
                     "reference": lambda spec: lambda input: input.sum(-1),
                     "output": lambda spec: (spec.shape[:-1], spec.dtype), **fields})


def _rowsum_backend(op: str):
    """A backend named "rowsums" serving ``op`` (a row sum) on the CPU, below torch's priority."""
    import types

    from dispatch import BackendInfo, Verdict

    return types.SimpleNamespace(
        dispatch_backend_info=dispatch.hookimpl(lambda: BackendInfo(name="rowsums", version="1", ops=(op,),
                                                                    priority={"cpu": 1})),
        dispatch_check=dispatch.hookimpl(lambda op, spec: Verdict.yes()),
        dispatch_kernel=dispatch.hookimpl(lambda op, spec, config: lambda input: input.sum(-1)))


@pytest.mark.parametrize("name", ["class", "None", "lambda"])
def test_an_op_named_like_a_python_keyword_is_refused_at_its_declaration(name):
    # dispatch.<keyword> could never be called: its generated function would not even compile
    with pytest.raises(ValueError, match=f"not a Python keyword \\(got '{name}'\\)"):
        _rowsum(name)


def test_an_op_declared_by_two_packages_is_refused_for_the_second_and_kept_for_the_first():
    decl = _rowsum()
    dispatch.register(op_package(decl), name="rowsum_a")
    try:
        with pytest.raises(dispatch.PluginError, match="op 'rowsum', which is already declared by plugin 'rowsum_a'"):
            dispatch.register(op_package(decl), name="rowsum_b")  # the same OpDecl: whose op would it be?
        with pytest.raises(KeyError):
            dispatch.unregister("rowsum_b")  # never registered
        torch.testing.assert_close(dispatch.rowsum(torch.ones(2, 3)), torch.full((2,), 3.0))
    finally:
        dispatch.unregister("rowsum_a")
    assert "rowsum" not in dispatch.declared_ops()


def test_a_package_returning_one_op_name_twice_is_refused_whole():
    with pytest.raises(dispatch.PluginError, match="dispatch_ops returns op 'twin' 2 times"):
        dispatch.register(op_package(_rowsum("twin"), _rowsum("twin")), name="twin_ops")
    assert "twin" not in dispatch.declared_ops()
    dispatch.register(op_package(_rowsum("twin")), name="twin_ops")  # nothing of the refused one stayed
    dispatch.unregister("twin_ops")


def test_declarations_that_could_not_be_called_are_refused_naming_the_field():
    from dispatch.backend import TensorArg

    with pytest.raises(ValueError, match="'tensors' names 'input' more than once"):
        _rowsum(tensors=(TensorArg("input"), TensorArg("input")))
    with pytest.raises(ValueError, match="'parse' has a parameter 'out', and out=True adds"):
        _rowsum(parse=lambda input, out=None: {}, out=True)


def test_a_non_tensor_for_a_declared_tensor_is_torchs_type_error():
    from dispatch.backend import TensorArg

    decl = _rowsum("rowsum_mask", parse=lambda input, mask=None: {},
                   tensors=(TensorArg("input"), TensorArg("mask", optional=True)),
                   reference=lambda spec: lambda input, mask: input.sum(-1))
    dispatch.register(op_package(decl), name="rowsum_mask_ops")
    try:
        for bad, kind in (([True, False, True], "list"), (3, "int")):
            with pytest.raises(TypeError, match=f"rowsum_mask\\(\\): argument 'mask' must be Tensor, not {kind}"):
                dispatch.rowsum_mask(torch.ones(2, 3), mask=bad)
        with pytest.raises(TypeError, match="argument 'input' must be Tensor, not NoneType"):
            dispatch.rowsum_mask(None)
        torch.testing.assert_close(dispatch.rowsum_mask(torch.ones(2, 3)), torch.full((2,), 3.0))
    finally:
        dispatch.unregister("rowsum_mask_ops")


def test_an_ops_own_hook_answering_nonsense_is_a_type_error_naming_the_field_not_a_backends_fault():
    from dispatch.ab import compare

    decl = _rowsum("odd_rowsum", tolerance=lambda dtype: "tight")
    backend = _rowsum_backend("odd_rowsum")
    dispatch.register(op_package(decl), name="odd_rowsum_ops")
    dispatch.register(backend, name="rowsums")
    try:
        with pytest.raises(TypeError, match=r"op 'odd_rowsum': OpDecl.tolerance must return \(rtol, atol\), two "
                                            r"numbers >= 0 \(got 'tight' for torch.float32\)"):
            dispatch.odd_rowsum(torch.ones(2, 3), backend="rowsums")
        assert not dispatch.faults()  # the backend is not blamed for the op's answer
    finally:
        dispatch.unregister("rowsums")
        dispatch.unregister("odd_rowsum_ops")
    dispatch.register(op_package(_rowsum("big_rowsum", bytes_moved=lambda spec: -5)), name="big_rowsum_ops")
    try:
        with pytest.raises(TypeError, match=r"op 'big_rowsum': OpDecl.bytes_moved must return the bytes a call "
                                            r"moves, an int >= 0 \(got -5\)"):
            compare("big_rowsum", shapes=["4x8"], backends="torch", device="cpu", warmup=1, rep=1)
    finally:
        dispatch.unregister("big_rowsum_ops")


@pytest.mark.parametrize("field,value,said", [
    ("parse", lambda input: None, r"OpDecl.parse must return a dict of the op's attributes, like \{'dims': \(1,\)\} "
                                  r"or \{\} \(got None\)"),
    ("output", lambda spec: (2,), r"OpDecl.output must return the result's \(shape, dtype\), like "
                                  r"\(\(4, 8\), torch.float32\) \(got \(2,\)\)"),
    ("output", lambda spec: None, r"OpDecl.output must return the result's \(shape, dtype\)"),
])
def test_a_parse_or_output_answering_nonsense_is_named_at_the_call(field, value, said):
    dispatch.register(op_package(_rowsum("bad_rowsum", **{field: value})), name="bad_rowsum_ops")
    try:
        with pytest.raises(TypeError, match=f"op 'bad_rowsum': {said}"):
            dispatch.bad_rowsum(torch.ones(2, 3))
    finally:
        dispatch.unregister("bad_rowsum_ops")


@pytest.mark.parametrize("backend,output,said", [
    # a dtype the reference does not return: torch.compile would trace float32 and get bfloat16
    ("torch", lambda spec: (spec.shape[:-1], torch.float32),
     r"OpDecl.output says \(2,\) torch.float32 .* but OpDecl.reference returned \(2,\) torch.bfloat16"),
    # a shape the reference does not return, whichever backend serves: a kernel is held to the reference
    ("torch", lambda spec: (spec.shape, spec.dtype),
     r"OpDecl.output says \(2, 3\) torch.bfloat16 .* but OpDecl.reference returned \(2,\) torch.bfloat16"),
    ("rowsums", lambda spec: (spec.shape, spec.dtype),
     r"OpDecl.output says shape \(2, 3\) .* but OpDecl.reference returned shape \(2,\)"),
])
def test_an_output_rule_the_reference_contradicts_is_the_ops_type_error(backend, output, said):
    dispatch.register(op_package(_rowsum("liar_rowsum", output=output)), name="liar_rowsum_ops")
    dispatch.register(_rowsum_backend("liar_rowsum"), name="rowsums")
    try:
        x = torch.ones(2, 3, dtype=torch.bfloat16)
        for _ in range(2):  # the second call is resolved anew, not served unchecked
            with pytest.raises(TypeError, match=f"op 'liar_rowsum': {said}"):
                dispatch.liar_rowsum(x, backend=backend)
        assert not dispatch.faults()  # the op's declaration is wrong, not the backend
    finally:
        dispatch.unregister("rowsums")
        dispatch.unregister("liar_rowsum_ops")


def test_a_wrongly_typed_field_is_one_line_naming_it():
    # (attrs' own message is a tuple holding the whole attribute's repr)
    from dispatch import BackendInfo
    from dispatch.backend import TensorArg

    for make, said in ((lambda: _rowsum(123), "'name' must be a str (got 123)"),
                       (lambda: _rowsum(tensors="input"), "'tensors' must be a tuple of TensorArg, like "
                                                          "(TensorArg('input'), TensorArg('weight', optional=True)) "
                                                          "(got 'input')"),
                       (lambda: _rowsum(tensors=TensorArg("input")), "'tensors' must be a tuple of TensorArg"),
                       (lambda: TensorArg("input", absent_dtype="float32"),
                        "'absent_dtype' must be a torch.dtype (got 'float32')"),
                       (lambda: BackendInfo(name="x", version="1", ops=("softmax",), available=False),
                        "'available' must be a dispatch.Verdict, like Verdict.yes() or Verdict.no(")):
        with pytest.raises(TypeError) as info:
            make()
        assert str(info.value).startswith(said) and "Attribute(" not in str(info.value), str(info.value)


def test_a_refusal_without_a_reason_says_what_it_got():
    from dispatch import Verdict

    for reason in (None, "", 3):
        with pytest.raises(ValueError, match=f"'reason' must be a non-empty str \\(got {reason!r}\\)"):
            Verdict.no(reason)


@pytest.mark.parametrize("backward,said", [
    (lambda spec: (lambda grad, input, out: None), "OpDecl.backward gave no gradient for 'input'"),
    (lambda spec: (lambda grad, input, out: grad), "OpDecl.backward returned a gradient of (2,) on cpu for (2, 3)"),
    (lambda spec: 5, "OpDecl.backward(spec) must return a function"),
], ids=["none", "wrong shape", "not a function"])
def test_a_declared_backward_answering_wrongly_is_the_ops_type_error_not_a_gradient(backward, said):
    # served by a kernel backend, the op's declared backward gives the gradients: checked as a
    # backend's own backward kernel is (None would have passed for a zero gradient)
    decl = _rowsum("grad_rowsum", backward=backward)
    backend = _rowsum_backend("grad_rowsum")
    dispatch.register(op_package(decl), name="grad_rowsum_ops")
    dispatch.register(backend, name="rowsums")
    try:
        x = torch.ones(2, 3, requires_grad=True)
        with pytest.raises(TypeError, match=f"op 'grad_rowsum': {re.escape(said)}"):
            dispatch.grad_rowsum(x, backend="rowsums").sum().backward()
    finally:
        dispatch.unregister("rowsums")
        dispatch.unregister("grad_rowsum_ops")


def test_a_number_given_as_a_tensor_is_read_on_every_call_not_remembered():
    # a 0-d tensor standing for a number (a dim, an eps, a size in normalized_shape) may change in place
    # between calls: each call reads its value then, as torch does
    import torch.nn.functional as F

    x = _x((4, 8))
    dim = torch.tensor(1)
    dispatch.softmax(x, dim)
    dim.fill_(0)
    torch.testing.assert_close(dispatch.softmax(x, dim), torch.softmax(x, 0))
    eps = torch.tensor(1e-3)
    dispatch.layer_norm(x, [8], eps=eps)
    eps.fill_(100.0)
    torch.testing.assert_close(dispatch.layer_norm(x, [8], eps=eps), F.layer_norm(x, [8], eps=100.0))
    size = torch.tensor(8)
    dispatch.rms_norm(x, [size])
    size.fill_(4)
    with pytest.raises(RuntimeError) as by_torch:
        F.rms_norm(x, [size])
    with pytest.raises(type(by_torch.value)):
        dispatch.rms_norm(x, [size])
