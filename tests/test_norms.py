"""rms_norm and layer_norm behave exactly like torch.nn.functional's: values, dtypes, shapes, grads, errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import dispatch
from dispatch.backend import spec_of

FLOATS = [torch.float64, torch.float32, torch.float16, torch.bfloat16]


def _t(shape, dtype=torch.float32, seed=0, scale=1.0, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale + shift).to(dtype)


def _calls(x, shape, with_weight, with_bias):
    w = _t(shape, x.dtype, 1, 0.5, 1.0) if with_weight else None
    b = _t(shape, x.dtype, 2, 0.5) if with_bias else None
    return ((F.rms_norm, dispatch.rms_norm, (x, list(shape), w), {}),
            (F.layer_norm, dispatch.layer_norm, (x, list(shape), w, b), {}))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,normalized", [((4, 16), (16,)), ((2, 3, 4, 5), (4, 5)), ((7,), (7,)),
                                              ((2, 3, 5), (2, 3, 5))])
@pytest.mark.parametrize("affine", [(False, False), (True, False), (True, True)], ids=["plain", "w", "wb"])
def test_norms_match_torch(dtype, shape, normalized, affine):
    x = _t(shape, dtype, scale=2.0, shift=0.5)
    for ref, ours, args, kwargs in _calls(x, normalized, *affine):
        expected = ref(*args, **kwargs)
        got = ours(*args, **kwargs)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


@pytest.mark.parametrize("eps", [None, 1e-2, 1, True])
def test_eps_like_torch_including_none(eps):
    # tiny values: eps decides the result, so a wrong default shows
    x = _t((3, 32), torch.bfloat16, scale=1e-4)
    torch.testing.assert_close(dispatch.rms_norm(x, (32,), eps=eps), F.rms_norm(x, (32,), eps=eps), rtol=0, atol=0)
    if eps is not None:
        torch.testing.assert_close(dispatch.layer_norm(x, (32,), eps=eps), F.layer_norm(x, (32,), eps=eps),
                                   rtol=0, atol=0)


def test_rms_norm_eps_none_is_the_compute_type_epsilon():
    from dispatch.norms import norm_eps

    x = _t((2, 8), torch.bfloat16)
    assert norm_eps(spec_of("rms_norm", x, (8,))) == torch.finfo(torch.float32).eps
    assert norm_eps(spec_of("rms_norm", x.double(), (8,))) == torch.finfo(torch.float64).eps
    assert norm_eps(spec_of("rms_norm", x, (8,), eps=0.5)) == 0.5


@pytest.mark.parametrize("shape,normalized", [((0, 8), (8,)), ((3, 0), (0,)), ((2, 0, 4), (4,))])
def test_empty_tensors(shape, normalized):
    x = torch.empty(shape)
    assert dispatch.rms_norm(x, normalized).shape == F.rms_norm(x, normalized).shape
    assert dispatch.layer_norm(x, normalized).shape == F.layer_norm(x, normalized).shape


def test_strided_and_transposed_input():
    base = _t((6, 20))
    for x in (base[::2], base[:, :16], base.t().contiguous().t()):
        n = x.shape[-1]
        torch.testing.assert_close(dispatch.rms_norm(x, (n,)), F.rms_norm(x, (n,)))
        torch.testing.assert_close(dispatch.layer_norm(x, (n,)), F.layer_norm(x, (n,)))


@pytest.mark.filterwarnings("ignore:Mismatch dtype")
def test_mixed_dtype_weight_gives_torchs_result():
    x = _t((4, 8), torch.bfloat16)
    w = _t((8,), torch.float32, 1)
    got, expected = dispatch.rms_norm(x, (8,), w), F.rms_norm(x, (8,), w)
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("affine", [(False, False), (True, False), (True, True), (False, True)],
                         ids=["plain", "w", "wb", "b"])
def test_gradients_match_torch(affine):
    x = _t((3, 4, 6), torch.float64, scale=2.0)
    for ref, ours, args, _ in _calls(x, (4, 6), *affine):
        leaves = [a.clone().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
        ours(*leaves).pow(2).sum().backward()
        ref_leaves = [a.clone().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
        ref(*ref_leaves).pow(2).sum().backward()
        for a, b in zip(leaves, ref_leaves):
            if isinstance(a, torch.Tensor):
                torch.testing.assert_close(a.grad, b.grad)


def test_inputs_are_not_modified():
    x, w, b = _t((4, 8)), _t((8,), seed=1), _t((8,), seed=2)
    copies = [t.clone() for t in (x, w, b)]
    dispatch.layer_norm(x, (8,), w, b)
    dispatch.rms_norm(x, (8,), w)
    for t, c in zip((x, w, b), copies):
        assert torch.equal(t, c)


def _raised(fn):
    try:
        fn()
    except Exception as exc:  # the point is to compare what was raised
        return type(exc), str(exc)
    return None


_X = torch.ones(2, 4)
_BAD = [
    ("shape-mismatch", lambda m, f: f(m)(_X, (5,))),
    ("shape-empty", lambda m, f: f(m)(_X, ())),
    ("shape-too-long", lambda m, f: f(m)(_X, (3, 2, 4))),
    ("shape-int", lambda m, f: f(m)(_X, 4)),
    ("shape-bool", lambda m, f: f(m)(_X, [True])),
    ("shape-float", lambda m, f: f(m)(_X, (4.0,))),
    ("weight-shape", lambda m, f: f(m)(_X, (4,), torch.ones(5))),
    ("weight-list", lambda m, f: f(m)(_X, (4,), [1.0] * 4)),
    ("int-input", lambda m, f: f(m)(torch.ones(2, 4, dtype=torch.int64), (4,))),
    ("list-input", lambda m, f: f(m)([[1.0] * 4], (4,))),
    ("eps-str", lambda m, f: f(m)(_X, (4,), eps="x")),
    ("eps-fraction", lambda m, f: f(m)(_X, (4,), eps=__import__("fractions").Fraction(1, 100000))),
]


@pytest.mark.parametrize("case", _BAD, ids=[c[0] for c in _BAD])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_bad_arguments_raise_torchs_exception(op, case):
    def pick(module):
        return getattr(F, op) if module is F else getattr(dispatch, op)

    torch_err = _raised(lambda: case[1](F, pick))
    ours = _raised(lambda: case[1](dispatch, pick))
    assert torch_err is not None, "the case must be an error in torch"
    assert ours is not None and ours[0] is torch_err[0], (ours, torch_err)


def test_layer_norm_bias_shape_and_none_eps_raise_like_torch():
    for call in (lambda m: m.layer_norm(_X, (4,), None, torch.ones(3)), lambda m: m.layer_norm(_X, (4,), eps=None)):
        torch_err, ours = _raised(lambda: call(F)), _raised(lambda: call(dispatch))
        assert torch_err is not None and ours is not None and ours[0] is torch_err[0], (ours, torch_err)


def test_declarations_bucket_bytes_and_sample():
    x = torch.ones(5, 3, 1000)
    spec = spec_of("layer_norm", x, (1000,), torch.ones(1000), None)
    decl = dispatch.declared_ops()["layer_norm"]
    assert decl.bucket(spec) == "M<=16,N<=1024,rows,k=1,weight"
    assert decl.bytes_moved(spec) == (15000 + 1000 + 15000) * 4
    args, kwargs = decl.sample((4, 64), torch.float32, torch.device("cpu"), bias=False)
    assert args[1] == [64] and args[2].shape == (64,) and args[3] is None
    args, _ = dispatch.declared_ops()["rms_norm"].sample((4, 64), torch.float32, torch.device("cpu"),
                                                         weight=False)
    assert args[2] is None
    strided = spec_of("rms_norm", torch.ones(8, 4).t(), (8,))
    assert "strided" in decl.bucket(strided)
    # rows of a wider buffer get a bucket of their own, apart from dense rows of the same sizes
    apart = spec_of("layer_norm", torch.ones(5, 3, 1200)[..., :1000], (1000,), torch.ones(1000), None)
    assert decl.bucket(apart) == "M<=16,N<=1024,rows_apart,k=1,weight"
    one_row = spec_of("layer_norm", torch.ones(1, 1200)[:, :1000], (1000,), torch.ones(1000), None)
    assert decl.bucket(one_row) == "M<=1,N<=1024,rows,k=1,weight"


def test_public_names():
    assert {"rms_norm", "layer_norm"} <= set(dispatch.__all__)
    assert dispatch.op("rms_norm") is dispatch.rms_norm
    assert list(__import__("inspect").signature(dispatch.layer_norm).parameters)[:5] == [
        "input", "normalized_shape", "weight", "bias", "eps"]


def test_cli_explain_and_ab_take_norm_arguments(capsys):
    from dispatch.cli import main

    assert main(["explain", "layer_norm", "--shape", "4x32", "--dtype", "float32", "--arg", "bias=False"]) == 0
    out = capsys.readouterr().out
    assert "layer_norm(4x32 float32, 32 float32" in out and "weight" in out and "bias" not in out.split("\n")[1]
    assert main(["ab", "rms_norm", "--shape", "2x3x8", "--dtype", "float32", "--backends", "torch",
                 "--arg", "normalized_shape=[3, 8]", "--arg", "eps=0.1"]) == 0
    assert "pass" in capsys.readouterr().out
    # a shell's "false" is False, not the (true) string "false"; anything else but a bool is refused
    assert main(["explain", "layer_norm", "--shape", "4x32", "--arg", "weight=false", "--arg", "bias=false"]) == 0
    assert "layer_norm(4x32 float32, eps=" in capsys.readouterr().out
    assert main(["explain", "layer_norm", "--shape", "4x32", "--arg", "weight=no"]) == 2
    assert "'weight' of a sample is True or False" in capsys.readouterr().err


def test_ab_compare_reports_bytes_of_input_weight_and_output():
    from dispatch.ab import compare

    result = compare("rms_norm", [(8, 64)], backends="torch", warmup=1, rep=2, copy_bytes=1 << 16)
    row = result.rows()[0]
    assert row["status"] == "pass"
    assert row["bytes_moved"] == (8 * 64 * 2 + 64) * 4  # x read, y written, weight read


def test_cli_explain_grad_explains_the_training_call_and_its_backward(capsys):
    from dispatch.cli import main

    assert main(["explain", "rms_norm", "--shape", "4x32", "--dtype", "float32", "--device", "cpu", "--grad"]) == 0
    out = capsys.readouterr().out
    assert "backward: torch's" in out  # the CPU's first choice is torch: its backward is autograd's
    assert main(["explain", "rms_norm", "--shape", "4x32", "--dtype", "float32", "--device", "cpu"]) == 0
    assert "backward:" not in capsys.readouterr().out  # an inference call has none to speak of


def test_the_oracle_of_rms_norm_with_eps_none_uses_the_calls_epsilon():
    # the oracle computes in float64 but must keep the eps of the call's compute type (float32 here):
    # with float64's eps, rows of tiny values normalize to other numbers, and a correct kernel fails
    from dispatch.reference import expected_output

    x = torch.full((2, 8), 1e-3)
    spec = spec_of("rms_norm", x, (8,))
    torch.testing.assert_close(expected_output(spec, (x, None)), F.rms_norm(x, (8,)), rtol=1e-6, atol=0)
    wide = F.rms_norm(x.double(), (8,), eps=torch.finfo(torch.float32).eps).float()
    torch.testing.assert_close(expected_output(spec, (x, None)), wide, rtol=1e-7, atol=0)


def test_eps_as_numpy_scalars_and_0d_tensors_like_torch():
    np = pytest.importorskip("numpy")
    x = _t((3, 16), torch.float32)
    for eps in (np.float32(1e-3), np.float64(0.5), np.int64(1), torch.tensor(1e-3), torch.tensor(2)):
        torch.testing.assert_close(dispatch.rms_norm(x, [16], eps=eps), F.rms_norm(x, [16], eps=eps), rtol=0, atol=0)
        torch.testing.assert_close(dispatch.layer_norm(x, [16], eps=eps), F.layer_norm(x, [16], eps=eps),
                                   rtol=0, atol=0)
    for bad in (torch.tensor([1e-3]), torch.tensor(1e-3, requires_grad=True)):  # torch refuses these
        with pytest.raises(TypeError):
            F.layer_norm(x, [16], eps=bad)
        with pytest.raises(TypeError):
            dispatch.layer_norm(x, [16], eps=bad)


def test_what_torch_serves_beyond_floating_weights_is_served_by_torch():
    # rms_norm promotes an integer or bool weight and takes complex input; layer_norm refuses
    # them: dispatch does exactly what torch does (its reference serves what no kernel does)
    x = _t((3, 16), torch.float32, scale=1e-5)
    calls = [lambda m: m.rms_norm(x, [16], torch.arange(16)),
             lambda m: m.rms_norm(x, [16], torch.ones(16, dtype=torch.bool)),
             lambda m: m.rms_norm(torch.complex(x, -x), [16]),
             lambda m: m.rms_norm(torch.complex(x, x).to(torch.complex128), [16]),
             lambda m: m.layer_norm(x, [16], torch.arange(16)),
             lambda m: m.layer_norm(torch.complex(x, x), [16])]
    for call in calls:
        try:
            want = call(F)
        except Exception as exc:  # noqa: BLE001 - torch's exception, whichever it is
            with pytest.raises(type(exc)):
                call(dispatch)
            continue
        got = call(dispatch)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=0, atol=0)
