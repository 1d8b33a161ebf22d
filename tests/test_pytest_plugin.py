"""The pytest plugin: --dispatch-backend and its fixture, --dispatch-certify, and the conformance kit."""

from __future__ import annotations

import importlib
import types

import attrs
import pytest
import torch

import dispatch
from dispatch import BackendInfo, Verdict
from dispatch_pytest.cases import Case, default_cases
from dispatch_pytest.conformance import FAIL, PASS, REFUSED, CertificationError, certify, run_case

from op_packages import op_package

pytest_plugins = ["pytester"]


def naive_backend(name: str = "naive", fault: str | None = None) -> types.SimpleNamespace:
    """float32 softmax family without subtracting the maximum: right on ordinary inputs, wrong on
    large values and infinities. ``fault`` adds a protocol violation on top."""
    plugin = types.SimpleNamespace()

    @dispatch.hookimpl
    def dispatch_backend_info():
        return BackendInfo(name=name, version="0.0.1", ops=("softmax", "log_softmax", "logsumexp"), priority={"cpu": -50, "cuda": -50})

    @dispatch.hookimpl
    def dispatch_check(op, spec):
        if fault == "check raises":
            raise RuntimeError("no idea")
        if fault == "silent refusal":
            return Verdict(False, "")
        if spec.dtype != torch.float32 or spec.out_dtype != torch.float32:
            return Verdict.no("float32 only")
        return Verdict.yes("naive exp-sum")

    @dispatch.hookimpl
    def dispatch_kernel(op, spec, config):
        dims = spec.dims or (0,)

        def run(x):
            if fault == "writes input":
                x.zero_()
            if x.dim() == 0:
                return run(x.reshape(1)).reshape(())
            lse = torch.log(torch.exp(x).sum(dims, keepdim=True))
            if op == "softmax":
                return torch.exp(x) / torch.exp(lse)
            if op == "log_softmax":
                return x - lse
            return lse if spec.keepdim else lse.squeeze(dims)
        return run

    @dispatch.hookimpl
    def dispatch_backward(op, spec):
        if fault == "wrong backward":
            return lambda grad, x, y: grad * 2
        right = (lambda grad, x, y: y * (grad - (grad * y).sum(-1, keepdim=True)))  # softmax's (last dim)
        if fault == "backward writes grad":
            return lambda grad, x, y: (right(grad, x, y), grad.zero_())[0]
        if fault == "backward extra gradient":
            return lambda grad, x, y: (right(grad, x, y), torch.zeros_like(x))
        return None

    for fn in (dispatch_backend_info, dispatch_check, dispatch_kernel, dispatch_backward):
        setattr(plugin, fn.__name__, fn)
    return plugin


# pytester's in-process runs drop the modules a run imported, and a DSL with a native extension
# (TileLang's FFI, Triton's nanobind enums: "refusing to add duplicate key", then abort) cannot be
# imported twice in one process: import each once, before any run (conftest set TRITON_INTERPRET)
for _dsl in ("tilelang", "triton"):
    try:
        importlib.import_module(_dsl)
    except ImportError:
        pass

# plain torch.allclose: pytester's in-process runs drop modules a run imported (torch.testing's
# assert_close imports torch.distributed lazily), and importing those twice breaks torch
SMOKE_TEST = """
import torch, dispatch

def test_softmax_matches_torch(dispatch_backend):
    x = torch.randn(4, 16, device="cuda" if torch.cuda.is_available() else "cpu")
    assert torch.allclose(dispatch.softmax(x, backend=dispatch_backend), torch.softmax(x, -1))
"""


def test_the_fixture_runs_a_test_once_per_named_backend(pytester):
    dispatch.register(naive_backend(), name="naive")
    pytester.makepyfile(test_smoke=SMOKE_TEST)
    result = pytester.runpytest("-v", "--dispatch-backend=naive,torch")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_softmax_matches_torch?naive? PASSED*",
                                 "*test_softmax_matches_torch?torch? PASSED*"])


def test_without_the_option_the_fixture_covers_every_loaded_backend(pytester):
    dispatch.register(naive_backend(), name="naive")
    loaded = dispatch.backends()
    pytester.makepyfile(test_smoke=SMOKE_TEST)
    result = pytester.runpytest("-v", "-rs")
    unavailable = [n for n, info in loaded.items() if not info.available]
    result.assert_outcomes(passed=len(loaded) - len(unavailable), skipped=len(unavailable))
    for name in unavailable:  # e.g. triton with no GPU: skipped with the backend's own reason
        assert f"backend {name!r} unavailable: {loaded[name].available.reason}" in result.stdout.str()


def test_naming_a_backend_that_is_not_loaded_is_a_usage_error(pytester):
    pytester.makepyfile(test_smoke=SMOKE_TEST)
    result = pytester.runpytest("--dispatch-backend=torch,nosuchbackend")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*'nosuchbackend'*not loaded*loaded: *torch*"])


def test_certification_fails_for_a_wrong_backend_and_says_where(pytester):
    dispatch.register(naive_backend(), name="naive")
    result = pytester.runpytest("--dispatch-certify=naive", "-rfs")
    outcomes = result.parseoutcomes()
    assert result.ret == pytest.ExitCode.TESTS_FAILED and outcomes["failed"] > 0 and outcomes["passed"] > 0
    result.stdout.fnmatch_lines([
        "*dispatch conformance of naive: softmax-float32-4x64-dim-1-large*",
        "naive fails conformance case softmax-float32-4x64-dim-1-large: differs from the reference: the result has NaN at *",
        "SKIPPED*naive refused: float32 only",  # a refusal is not a failure
    ])
    result.stdout.no_fnmatch_line("FAILED*float16*")
    result.stdout.no_fnmatch_line("FAILED*-dim-1 *")  # ordinary inputs pass: only large values and infinities fail
    result.stdout.no_fnmatch_line("*rms_norm*")  # the grid of the ops it implements only


def test_certifying_on_a_device_that_is_not_there_is_a_usage_error_not_a_green_run(pytester):
    # every case would be refused (the op's own code can't make its inputs there): 0 checked, exit 0
    missing = "cuda" if not torch.cuda.is_available() else "cuda:64"
    result = pytester.runpytest("--dispatch-certify=torch", f"--dispatch-device={missing}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--dispatch-device: device '{missing}' can't be used here*"])
    with pytest.raises(ValueError, match=f"device '{missing}' can't be used here"):
        certify("torch", device=missing)


@pytest.mark.parametrize("options", [["--dispatch-certify=torch", "--dispatch-device=meta"],
                                     ["--dispatch-certify="], ["--dispatch-certify=,"], ["--dispatch-backend="]],
                         ids=["meta device", "empty certify", "comma certify", "empty backend"])
def test_an_option_that_would_run_or_check_nothing_is_a_usage_error(pytester, options):
    result = pytester.runpytest(*options)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    said = "holds no data" if "meta" in options[-1] else "names no backend"
    result.stderr.fnmatch_lines([f"*{said}*"])


def test_certify_names_a_meta_device_or_a_case_that_is_not_one():
    with pytest.raises(ValueError, match="device 'meta' can't be used here .*holds no data"):
        certify("torch", device="meta")
    with pytest.raises(TypeError, match=r"'cases' must hold dispatch_pytest.cases.Case \(or OpCase\) objects.*got 1"):
        certify("torch", cases=[1], device="cpu")
    with pytest.raises(TypeError, match="'cases' must be an iterable"):
        certify("torch", cases=5, device="cpu")


def test_certification_passes_for_the_torch_reference(pytester):
    result = pytester.runpytest("--dispatch-certify=torch")
    result.assert_outcomes(passed=len(default_cases()))


def test_conformance_tests_helper_follows_the_dispatch_backend_option(pytester):
    dispatch.register(naive_backend(), name="naive")
    pytester.makepyfile(test_conformance="""
        import torch
        from dispatch_pytest.cases import Case
        from dispatch_pytest.conformance import conformance_tests

        CASES = [Case("logsumexp", torch.float32, (8, 128)), Case("logsumexp", torch.float32, (4, 64), values="large")]
        test_named = conformance_tests("torch", cases=CASES)
        test_each = conformance_tests(cases=CASES)
    """)
    result = pytester.runpytest("-v", "--dispatch-backend=naive")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*test_each?naive-logsumexp-float32-4x64-dim-1-large? FAILED*"])


def test_certify_returns_a_frozen_report_of_passes_refusals_and_failures():
    dispatch.register(naive_backend(), name="naive")
    cases = [Case("softmax", torch.float32, (8, 128)), Case("softmax", torch.float16, (8, 128)),
             Case("log_softmax", torch.float32, (10, 37), values="special")]
    report = certify("naive", cases, device="cpu")
    assert [r.outcome for r in report.results] == [PASS, REFUSED, FAIL]
    assert report.refused[0].reason == "float32 only" and not report.ok
    assert "log_softmax-float32-10x37-dim-1-special: differs from the reference" in str(report)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        report.results = ()
    with pytest.raises(CertificationError, match="1 passed, 1 refused, 1 failed"):
        report.raise_for_failures()


@pytest.mark.parametrize(("fault", "why"), [
    ("check raises", "dispatch_check must return a Verdict and never raise: RuntimeError: no idea"),
    ("silent refusal", "refused without a reason"),
    ("writes input", "the kernel wrote into its input"),
    ("wrong backward", "backward of input differs from autograd through the reference"),
    ("backward writes grad", "the backward kernel wrote into its input (its grad_output, an input or"),
    ("backward extra gradient", "the backward kernel returned 2 gradients for 1 inputs"),
])
def test_protocol_violations_fail_certification(fault, why):
    dispatch.register(naive_backend("faulty", fault), name="faulty")
    result = run_case("faulty", Case("softmax", torch.float32, (8, 128), grad=True), device="cpu")
    assert result.outcome == FAIL and why in result.reason


def _rowmax_package():
    # an op that, as torch.amax does, rejects rows of no element (its parse raises IndexError)
    from dispatch.backend import OpDecl, TensorArg

    def parse(input):
        if input.shape[-1] == 0:
            raise IndexError("rowmax(): rows of no element have no maximum")
        return {}

    decl = OpDecl(name="rowmax", parse=parse, tensors=(TensorArg("input"),),
                  reference=lambda spec: lambda input: input.amax(-1),
                  output=lambda spec: (spec.shape[:-1], spec.dtype))
    return op_package(decl)


def test_another_packages_op_neither_fails_nor_crashes_a_backends_certification():
    from dispatch_pytest.cases import sample_cases

    dispatch.register(_rowmax_package(), name="rowmax_ops")
    dispatch.register(naive_backend(), name="naive")
    cases = [*sample_cases("rowmax"), Case("softmax", torch.float32, (8, 128))]
    assert any(0 in c.shape for c in cases)  # the grid has the empty rows the op rejects
    report = certify("naive", cases, device="cpu")
    assert not report.failed, str(report)
    assert all(r.reason == "naive does not implement rowmax" for r in report.refused)
    assert report.results[-1].outcome == PASS
    # the reference, which implements it: the empty rows are a case the op itself refuses
    report = certify("torch", sample_cases("rowmax"), device="cpu")
    assert not report.failed, str(report)
    assert any("the op's own code raised IndexError: rowmax(): rows of no element" in r.reason
               for r in report.refused)


def test_an_op_whose_output_rule_disagrees_with_its_reference_fails_certification():
    from dispatch.backend import OpDecl, TensorArg

    decl = OpDecl(name="rowsum_bad", parse=lambda input: {}, tensors=(TensorArg("input"),),
                  reference=lambda spec: lambda input: input.sum(-1),
                  output=lambda spec: (spec.shape, spec.dtype))  # wrong: the last dim is reduced

    dispatch.register(op_package(decl), name="rowsum_bad_ops")
    result = run_case("torch", Case("softmax", torch.float32, (8, 128)), device="cpu")
    assert result.outcome == PASS
    from dispatch_pytest.cases import OpCase

    result = run_case("torch", OpCase("rowsum_bad", torch.float32, (8, 128)), device="cpu")
    assert result.outcome == FAIL and "output rule gives (8, 128) torch.float32, its reference returns (8,)" \
        in result.reason


def test_an_op_of_two_tensors_without_a_sample_factory_says_what_to_declare():
    from dispatch.backend import OpDecl, TensorArg
    from dispatch.ab import compare

    decl = OpDecl(name="axpy2", parse=lambda input, other: {},
                  tensors=(TensorArg("input"), TensorArg("other")),
                  reference=lambda spec: lambda input, other: input + other,
                  output=lambda spec: (spec.shape, spec.dtype))

    dispatch.register(op_package(decl), name="axpy2_ops")
    with pytest.raises(TypeError, match=r"axpy2: the default 'sample' makes the first tensor only.*input, other"):
        compare("axpy2", shapes=[(4, 8)], backends=["torch"], device="cpu")


def test_certifying_a_backend_that_is_not_loaded_says_so():
    with pytest.raises(dispatch.UnknownBackendError, match="'nosuchbackend' is not loaded.*loaded: .*torch"):
        certify("nosuchbackend")


def test_cases_are_reproducible_and_laid_out_as_named():
    case = Case("softmax", torch.float16, (6, 40), layout="strided")
    assert torch.equal(case.make_input(), case.make_input())
    x = case.make_input()
    assert x.stride() == (80, 2) and x.dtype == torch.float16
    assert Case("softmax", torch.float32, (6, 40), layout="expanded").make_input().stride()[0] == 0
    assert Case("softmax", torch.float32, (6, 40), layout="offset").make_input().storage_offset() == 1
    with pytest.raises(ValueError, match="'keepdim' must be False for softmax"):
        Case("softmax", torch.float32, (4, 4), keepdim=True)
    ids = [c.id for c in default_cases()]
    assert len(ids) == len(set(ids))


def test_the_kit_catches_an_online_softmax_that_turns_a_long_neg_inf_run_into_nan():
    """Blockwise online softmax with the naive rescale exp(m_old - m_new): a block of -inf only gives
    exp(-inf - -inf) = NaN. Short rows (one block) pass; the boundary rows catch it."""
    import types

    from dispatch.backend import BackendInfo, Verdict

    def online(x, block=64):
        m = torch.full(x.shape[:-1], float("-inf"), dtype=torch.float64)
        s = torch.zeros(x.shape[:-1], dtype=torch.float64)
        xd = x.double()
        for start in range(0, x.shape[-1], block):
            part = xd[..., start:start + block]
            m_new = torch.maximum(m, part.amax(-1))
            s = s * torch.exp(m - m_new) + torch.exp(part - m_new.unsqueeze(-1)).sum(-1)
            m = m_new
        return (torch.exp(xd - m.unsqueeze(-1)) / s.unsqueeze(-1)).to(x.dtype)

    plugin = types.SimpleNamespace(
        dispatch_backend_info=dispatch.hookimpl(lambda: BackendInfo(name="online", version="1", ops=("softmax",))),
        dispatch_check=dispatch.hookimpl(lambda op, spec: Verdict.yes() if spec.dims == (spec.ndim - 1,)
                                         and spec.out_dtype == spec.dtype else Verdict.no("last dim only")),
        dispatch_kernel=dispatch.hookimpl(lambda op, spec, config: online))
    dispatch.register(plugin, name="online")
    short = run_case("online", Case("softmax", torch.float32, (10, 37), values="special"), device="cpu")
    long = run_case("online", Case("softmax", torch.float32, (8, 1100), values="boundary"), device="cpu")
    assert short.outcome == "pass", short.reason
    assert long.outcome == FAIL and "NaN" in long.reason, long.reason


def _norm_backend(name: str, fault: str):
    """layer_norm through torch's, with one fault: "needs weight" (crashes without one),
    "requires grad" (returns a tensor that requires grad) or "input's dtype" (returns it where the
    call's result is float32: a half-precision input read in the kernel under autocast)."""
    import torch.nn.functional as F

    plugin = types.SimpleNamespace()
    plugin.dispatch_backend_info = dispatch.hookimpl(
        lambda: BackendInfo(name=name, version="0.0.1", ops=("layer_norm",), priority={"cpu": -50, "cuda": -50}))
    plugin.dispatch_check = dispatch.hookimpl(lambda op, spec: Verdict.yes("torch's layer_norm"))

    @dispatch.hookimpl
    def dispatch_kernel(op, spec, config):
        shape, eps, out = spec.attrs["normalized_shape"], spec.attrs["eps"], spec.out_dtype
        if fault == "needs weight":
            return lambda x, w, b: F.layer_norm(x.to(out), shape, w * 1, b, eps)
        if fault == "input's dtype":  # a float32 result asked of a half-precision input: the input's dtype
            return lambda x, w, b: F.layer_norm(x, shape, None if w is None else w.to(x.dtype),
                                                None if b is None else b.to(x.dtype), eps)
        return lambda x, w, b: F.layer_norm(x.to(out), shape, w, b, eps).requires_grad_()
    plugin.dispatch_kernel = dispatch_kernel
    return plugin


@pytest.mark.parametrize("fault,said", [("needs weight", "the kernel raised TypeError"),
                                        ("requires grad", "returned a tensor that requires grad"),
                                        ("input's dtype", "where the call's result is torch.float32")])
def test_certification_calls_an_op_without_its_optional_tensors_and_checks_what_dispatch_checks(fault, said):
    from dispatch_pytest.cases import sample_cases

    dispatch.register(_norm_backend("normish", fault), name="normish")
    try:
        report = certify("normish", sample_cases("layer_norm"), device="cpu")
    finally:
        dispatch.unregister("normish")
    failed = {r.case.id: r.reason for r in report.failed}
    assert failed and all(said in why for why in failed.values()), failed
    if fault == "needs weight":  # exactly the calls without a weight
        assert all("noweight" in case for case in failed)
        assert any("noweight" in r.case.id for r in report.failed) and report.passed
    if fault == "input's dtype":  # exactly autocast's calls, read in the kernel: float16 and bfloat16, with a backward
        assert sorted(failed) == ["layer_norm-bfloat16-7x33-autocast", "layer_norm-bfloat16-8x128-autocast-grad",
                                  "layer_norm-float16-7x33-autocast"]


def _saving_rms_norm(name: str, broken: bool):
    """rms_norm with a backward that reads each row's rstd from a buffer its forward fills
    (``backward.saves``, the eager path); ``broken``: the forward fills twice the rstd, which the
    backward without buffers (a compiled graph's) never sees."""
    import torch.nn.functional as F

    plugin = types.SimpleNamespace()
    plugin.dispatch_backend_info = dispatch.hookimpl(
        lambda: BackendInfo(name=name, version="0.0.1", ops=("rms_norm",), priority={"cpu": -50, "cuda": -50}))
    plugin.dispatch_check = dispatch.hookimpl(lambda op, spec: Verdict.yes("rows of 2-D inputs"))

    def rstd(x, eps):
        return torch.rsqrt(x.float().pow(2).mean(-1) + eps)

    @dispatch.hookimpl
    def dispatch_kernel(op, spec, config):
        shape, eps = spec.attrs["normalized_shape"], spec.attrs["eps"]

        def kernel(x, w, saved=()):
            if saved:
                saved[0].copy_(rstd(x, eps) * (2 if broken else 1))
            return F.rms_norm(x, shape, w, eps)
        return kernel

    @dispatch.hookimpl
    def dispatch_backward(op, spec):
        eps = spec.attrs["eps"]

        def backward(grad, x, w, y, *buffers):
            xf, g = x.float(), grad.float() * (w.float() if w is not None else 1)
            r = (buffers[0] if buffers else rstd(x, eps))[:, None]
            dx = r * (g - xf * r * r * (g * xf).mean(-1, keepdim=True))
            dw = None if w is None else (grad.float() * xf * r).sum(0).to(w.dtype)
            return dx.to(x.dtype), dw

        backward.saves = lambda x, w: (torch.empty(x.shape[0], dtype=torch.float32, device=x.device),)
        return backward
    plugin.dispatch_kernel = dispatch_kernel
    plugin.dispatch_backward = dispatch_backward
    return plugin


@pytest.mark.parametrize("broken", [False, True], ids=["right", "wrong buffers"])
def test_certification_runs_a_backward_with_the_buffers_its_forward_fills(broken):
    # a backward with saves has two paths: eager calls hand it the buffers the forward filled,
    # compiled graphs call it without them; the kit checks both
    from dispatch_pytest.cases import OpCase

    dispatch.register(_saving_rms_norm("saving", broken), name="saving")
    try:
        report = certify("saving", [OpCase("rms_norm", torch.float32, (8, 128), grad=True)], device="cpu")
    finally:
        dispatch.unregister("saving")
    if broken:
        (failed,) = report.failed
        assert "with the buffers the forward filled" in failed.reason and "backward of input" in failed.reason
    else:
        assert not report.failed and len(report.passed) == 1, report


def test_certification_fails_a_kernel_that_returns_one_buffer_it_keeps():
    # a kernel that writes every call's result into one buffer it keeps changes the result a
    # caller still holds from the call before
    import torch.nn.functional as F

    plugin = types.SimpleNamespace()
    plugin.dispatch_backend_info = dispatch.hookimpl(
        lambda: BackendInfo(name="keeper", version="0.0.1", ops=("rms_norm",), priority={"cpu": -50, "cuda": -50}))
    plugin.dispatch_check = dispatch.hookimpl(lambda op, spec: Verdict.yes("one buffer"))

    @dispatch.hookimpl
    def dispatch_kernel(op, spec, config):
        buffer = torch.empty(spec.out_shape, dtype=spec.out_dtype)

        def kernel(x, w):
            return buffer.copy_(F.rms_norm(x, spec.attrs["normalized_shape"], w, spec.attrs["eps"]))
        return kernel
    plugin.dispatch_kernel = dispatch_kernel
    from dispatch_pytest.cases import OpCase

    dispatch.register(plugin, name="keeper")
    try:
        report = certify("keeper", [OpCase("rms_norm", torch.float32, (8, 128))], device="cpu")
    finally:
        dispatch.unregister("keeper")
    (failed,) = report.failed
    assert "second call returned or wrote the first call's result" in failed.reason
