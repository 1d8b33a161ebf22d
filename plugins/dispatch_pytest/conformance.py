"""The conformance kit: certify a backend's hooks against the reference, case by case.

::

    from dispatch_pytest.conformance import certify
    report = certify("sample")        # a frozen Report; print(report) lists failures and refusals
    assert report.ok, report

Each case asks the backend's ``dispatch_check`` for a verdict. A refusal with a reason is not a
failure. A case the backend claims to serve (verdict ok) must give the reference's result, within
:func:`dispatch.tolerance.mismatch`, for every config of its tune space; a hook that raises, a
refusal without a reason, a kernel that writes to its input, or a wrong result is a failure.
As pytest tests: ``pytest --dispatch-certify=NAME``, or :func:`conformance_tests` in a test module.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import torch
from attrs import field, frozen
from attrs.validators import in_

import dispatch
from dispatch.backend import (EMPTY, Backend, CallSpec, Config, expected_output, gradients_problem, input_safety,
                              loaded_backends, mismatch, reference_kernel, resolve_device, result_problem)

from .cases import Case, OpCase, default_cases

PASS, REFUSED, FAIL = "pass", "refused", "fail"
CONFIGS = ("all", "default")


class CertificationError(AssertionError):
    """A backend got conformance cases wrong; the message is the report."""


@frozen
class CaseResult:
    """One case's outcome: ``pass``, ``refused`` (with the verdict's reason) or ``fail`` (with what went wrong)."""

    case: Case
    outcome: str = field(validator=in_((PASS, REFUSED, FAIL)))
    reason: str
    configs: tuple[Config, ...] = field(default=(), converter=tuple)

    @property
    def failed(self) -> bool:
        return self.outcome == FAIL

    def __str__(self) -> str:
        return f"{self.outcome.upper():<7} {self.case.id}: {self.reason}"


@frozen
class Report:
    """A backend's certification: every case's result, for one device."""

    backend: str
    version: str
    device: str
    results: tuple[CaseResult, ...] = field(converter=tuple)

    def _with(self, outcome: str) -> tuple[CaseResult, ...]:
        return tuple(r for r in self.results if r.outcome == outcome)

    @property
    def passed(self) -> tuple[CaseResult, ...]:
        return self._with(PASS)

    @property
    def refused(self) -> tuple[CaseResult, ...]:
        return self._with(REFUSED)

    @property
    def failed(self) -> tuple[CaseResult, ...]:
        return self._with(FAIL)

    @property
    def ok(self) -> bool:
        """No case failed (refusals are allowed)."""
        return not self.failed

    def summary(self) -> str:
        return (f"{self.backend} {self.version} on {self.device}: {len(self.passed)} passed, "
                f"{len(self.refused)} refused, {len(self.failed)} failed")

    def __str__(self) -> str:
        lines = [self.summary()]
        if self.failed:
            lines.append("failures:")
            lines += [f"  {r.case.id}: {r.reason}" for r in self.failed]
        if self.refused:
            lines.append("refusals (not failures), by reason:")
            for reason, count in Counter(r.reason for r in self.refused).most_common():
                lines.append(f"  {count:4d} x {reason}")
        return "\n".join(lines)

    def raise_for_failures(self) -> Report:
        """Raise :class:`CertificationError` (the report as its message) if any case failed."""
        if self.failed:
            raise CertificationError(str(self))
        return self


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def certify(backend: str, cases: Iterable[Case] | None = None, *, device: torch.device | str | None = None,
            configs: str = "all") -> Report:
    """Run ``cases`` (default: :func:`~dispatch_pytest.cases.default_cases`) against ``backend``.

    ``device`` defaults to CUDA when there is one; ``configs`` is ``"all"`` (every config of the
    tune space) or ``"default"``. Raises :class:`dispatch.UnknownBackendError` if ``backend`` is
    not loaded; never raises for what the backend does.
    """
    device = usable_device(device)
    loaded = _backend(backend)
    if cases is not None:
        try:
            cases = list(cases)
        except TypeError:
            raise TypeError(f"'cases' must be an iterable of dispatch_pytest.cases.Case (or OpCase), or None for "
                            f"the default grid (got {cases!r})") from None
        bad = next((c for c in cases if not isinstance(c, (Case, OpCase))), None)
        if bad is not None:
            raise TypeError(f"'cases' must hold dispatch_pytest.cases.Case (or OpCase) objects, like "
                            f"Case('softmax', torch.float32, (4, 16)) (got {bad!r})")
    results = tuple(run_case(backend, case, device=device, configs=configs)
                    for case in (default_cases(_ops_of(loaded)) if cases is None else cases))
    return Report(backend, loaded.info.version, str(device), results)


def usable_device(device: torch.device | str | None) -> torch.device:
    """``device`` (default: :func:`default_device`) as a torch.device this machine can allocate on; a
    ValueError naming it otherwise (a run on a device that isn't there would refuse every case)."""
    try:
        resolve_device(device)  # (dispatch's own check of a device, as the CLI and A/B runs make it)
    except ValueError as exc:
        raise ValueError(f"device {str(device)!r} can't be used here ({exc}); certify on 'cpu' or a device "
                         "this machine has") from None
    return torch.device(device) if device is not None else default_device()


def run_case(backend: str, case: Case, *, device: torch.device | str | None = None,
             configs: str = "all") -> CaseResult:
    """Certify ``backend`` on one case (see the module docstring for what passes)."""
    if configs not in CONFIGS:
        raise ValueError(f"'configs' must be one of {', '.join(CONFIGS)} (got {configs!r})")
    device = torch.device(device) if device is not None else default_device()
    under_test, reference = _backend(backend), _reference()
    if case.op not in under_test.info.ops and not under_test.info.reference:
        return CaseResult(case, REFUSED, f"{backend} does not implement {case.op}")
    decl = dispatch.declared_ops()[case.op]
    try:  # the op's own code (its sample, parse and output rule): not the backend's to pass or fail
        args, kwargs = case.arguments(device)
        values = decl.bind(*args, **kwargs)
        spec = decl.spec(values, out_dtype=case.out_dtype if isinstance(case, OpCase) else None)
        tensors = decl.tensors_of(values)
    except Exception as exc:  # noqa: BLE001 - reported as the case's refusal by the op
        return CaseResult(case, REFUSED, f"not a call of {case.op}: the op's own code raised "
                                         f"{type(exc).__name__}: {exc}")
    faults = len(under_test.faults)
    verdict = under_test.check(case.op, spec)
    if len(under_test.faults) > faults:
        return CaseResult(case, FAIL, f"dispatch_check must return a Verdict and never raise: "
                                      f"{under_test.faults[-1].error}")
    if verdict != under_test.check(case.op, spec):
        return CaseResult(case, FAIL, "dispatch_check is not deterministic: two calls gave different verdicts")
    if not verdict.ok:
        if not verdict.reason.strip():
            return CaseResult(case, FAIL, "refused without a reason: use Verdict.no('why, and what to do instead')")
        return CaseResult(case, REFUSED, verdict.reason)
    with torch.no_grad():
        expected = reference.kernel(case.op, spec, EMPTY)(*tensors)
    if isinstance(expected, torch.Tensor) and (tuple(expected.shape), expected.dtype) != (
            tuple(spec.out_shape), spec.out_dtype):  # the op's own declaration disagrees with itself
        return CaseResult(case, FAIL, f"the op's output rule gives {tuple(spec.out_shape)} {spec.out_dtype}, its "
                                      f"reference returns {tuple(expected.shape)} {expected.dtype}: fix {case.op}'s "
                                      "OpDecl.output (backends and torch.compile are told the rule's)")
    try:
        space = under_test.tune_space(case.op, spec)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit included: a plugin cannot end the process
        return CaseResult(case, FAIL, f"dispatch_tune_space raised {type(exc).__name__}: {exc}")
    if space is None:
        tried: tuple[Config, ...] = (EMPTY,)
    elif configs == "all":
        tried = space.configs
    else:
        tried = (space.default,)
    notes = []
    for config in tried:
        why, note = _check_forward(under_test, case, spec, config, tensors, expected)
        where = f"[{config}] " if space is not None else ""
        if why is not None:
            return CaseResult(case, FAIL, where + why, (config,))
        if note is not None:
            notes.append(where + note)
    default = space.default if space is not None else EMPTY
    why = _check_fresh_result(under_test, case, spec, default, tensors)
    if why is not None:
        return CaseResult(case, FAIL, why, (default,))
    why = _check_backward(under_test, case, spec, tensors, default) if case.grad else None
    if why is not None:
        return CaseResult(case, FAIL, why, tried)
    return CaseResult(case, PASS, "; ".join([verdict.reason, *notes]), tried)


def _check_forward(backend: Backend, case: Case, spec: CallSpec, config: Config, tensors: tuple,
                   expected: torch.Tensor) -> tuple[str | None, str | None]:
    """``(why it fails, None)`` or ``(None, a note for the report or None)``."""
    before = tuple(None if t is None else t.detach().clone() for t in tensors)
    tol = dispatch.declared_ops()[spec.op].tolerance(spec.out_dtype)
    try:
        kernel = backend.kernel(case.op, spec, config)
        with torch.no_grad():
            out = kernel(*tensors)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit included: a plugin cannot end the process
        return f"the kernel raised {type(exc).__name__}: {exc}", None
    unusable = result_problem(out)  # (as dispatch judges a result it would hand back)
    if unusable is not None:
        return f"the kernel {unusable}", None
    unsafe = input_safety(tuple(None if t is None else t.detach() for t in tensors), before, out)
    if unsafe is not None:
        return f"the kernel {unsafe}", None
    if out.device != expected.device:
        return f"output on {out.device}, the input's device is {expected.device}", None
    if isinstance(out, torch.Tensor) and out.dtype != spec.out_dtype and spec.out_dtype != spec.dtype:
        return (f"returned {out.dtype} where the call's result is {spec.out_dtype} (spec.out_dtype, not the "
                f"input's {spec.dtype}): return that dtype, or refuse the call in dispatch_check"), None
    why = mismatch(out, expected, tol)
    if why is None:
        return None, None
    exact = _exact(spec, tensors, expected.dtype)
    if exact is not None and mismatch(out, exact, tol) is None:
        # the reference itself rounds badly here (torch's float16/bfloat16 log_softmax on the CPU
        # rounds x - max before subtracting the log-sum); matching the exact result is conformant
        return None, f"matches the exact (float64) result where the reference is off: {why}"
    return f"differs from the reference: {why}", None


def _check_fresh_result(backend: Backend, case: Case, spec: CallSpec, config: Config, tensors: tuple) -> str | None:
    """Why two calls of the kernel (``config``) don't each return a result of their own, or None:
    a kernel that hands back one buffer it keeps (and writes again on the next call) changes a
    result its caller still holds."""
    try:
        kernel = backend.kernel(case.op, spec, config)
        with torch.no_grad():
            first = kernel(*tensors)
            kept = first.clone()
            second = kernel(*tensors)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit included: a plugin cannot end the process
        return f"two calls in a row: the kernel raised {type(exc).__name__}: {exc}"
    shared = first.numel() > 0 and second.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
    if shared or mismatch(first, kept, (0.0, 0.0)) is not None:
        return ("the kernel's second call returned or wrote the first call's result (one buffer kept and "
                "reused): each call must return a new tensor, since the caller keeps the one it got")
    return None


def _exact(spec: CallSpec, tensors: tuple, dtype: torch.dtype) -> torch.Tensor | None:
    """The reference computed in float64 on the same inputs (cast first, as ``dtype=`` does), rounded to ``dtype``."""
    if dtype == torch.float64 or not dtype.is_floating_point:
        return None
    return expected_output(spec, tuple(None if t is None else t.detach() for t in tensors))


def _check_backward(backend: Backend, case: Case, spec: CallSpec, tensors: tuple,
                    config: Config = EMPTY) -> str | None:
    """Why ``backend``'s backward fails ``case``, or None: as a compiled graph's backward node calls
    it (the output alone), then, where it has ``saves``, as an eager call does (the forward kernel,
    with ``config``, fills the buffers it hands the backward)."""
    try:
        backward = backend.backward(case.op, spec)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit included: a plugin cannot end the process
        return f"dispatch_backward raised {type(exc).__name__}: {exc}"
    if backward is None:
        return None  # dispatch differentiates the output with the op's reference backward
    leaves = tuple(None if t is None else t.detach().requires_grad_(t.dtype.is_floating_point) for t in tensors)
    with torch.enable_grad():
        y = reference_kernel(spec)(*leaves)
    grad = torch.randn(y.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    grad = grad.to(device=y.device, dtype=y.dtype)
    wanted = [t for t in leaves if t is not None and t.requires_grad]
    expected = tuple(torch.autograd.grad(y, wanted, grad, allow_unused=True))
    given = (grad, *(None if t is None else t.detach() for t in tensors), y.detach())
    before = tuple(None if t is None else t.clone() for t in given)
    try:
        with torch.no_grad():
            got = backward(*given)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit included: a plugin cannot end the process
        return f"the backward kernel raised {type(exc).__name__}: {exc}"
    wrote = input_safety(given, before, None)  # (its gradient, inputs and output are the user's, or autograd's)
    if wrote is not None:
        return f"the backward kernel {wrote} (its grad_output, an input or the forward's output)"
    why = _gradients_differ(spec, tensors, leaves, got, expected)
    if why is not None or not hasattr(backward, "saves"):
        return why
    plain = tuple(None if t is None else t.detach() for t in tensors)
    try:  # the eager path: the forward fills the buffers that backward.saves makes, the backward reads them
        buffers = tuple(backward.saves(*plain))
        with torch.no_grad():
            out = backend.kernel(case.op, spec, config)(*plain, saved=buffers)
            got = backward(grad, *plain, out, *buffers)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit included: a plugin cannot end the process
        return f"with the buffers its saves makes (the eager path), {type(exc).__name__} was raised: {exc}"
    why = mismatch(out, y.detach(), dispatch.declared_ops()[spec.op].tolerance(spec.out_dtype))
    if why is not None:
        return f"the forward kernel given saved= buffers differs from the reference: {why}"
    why = _gradients_differ(spec, tensors, leaves, got, expected)
    return None if why is None else f"with the buffers the forward filled (saves, the eager path): {why}"


def _gradients_differ(spec: CallSpec, tensors: tuple, leaves: tuple, got, expected: tuple) -> str | None:
    """Why a backward's gradients ``got`` are not ``expected`` (autograd through the reference,
    one per leaf that requires grad), or None."""
    needed = tuple(arg.name if leaf is not None and leaf.requires_grad else None
                   for arg, leaf in zip(spec.tensors, leaves))
    problem = gradients_problem(got, tuple(None if t is None else t.detach() for t in tensors), needed)
    if problem is not None:  # (as dispatch judges them when a training call runs it)
        return problem.replace("its backward kernel", "the backward kernel", 1)
    got = (got,) if isinstance(got, torch.Tensor) else tuple(got)
    wanted = iter(expected)
    for arg, leaf, g in zip(spec.tensors, leaves, got + (None,) * (len(leaves) - len(got))):
        if leaf is None or not leaf.requires_grad:
            continue
        e = next(wanted)
        if e is None or g is None:
            if e is not g and not (e is None and g is not None and not bool(g.abs().sum())):
                return f"backward of {arg.name}: {'no gradient' if g is None else 'a gradient'} where autograd " \
                       f"through the reference gives {'none' if e is None else 'one'}"
            continue
        why = mismatch(g, e)
        if why is not None:
            return f"backward of {arg.name} differs from autograd through the reference: {why}"
    return None


def _ops_of(backend: Backend) -> tuple[str, ...]:
    """The declared ops a backend implements (the reference: every one)."""
    declared = tuple(dispatch.declared_ops())
    return declared if backend.info.reference else tuple(op for op in declared if op in backend.info.ops)


def _backend(name: str) -> Backend:
    loaded = loaded_backends().get(name)
    if loaded is None:
        failures = "; ".join(f"{f.name}: {f.error}" for f in dispatch.load_failures()) or "none"
        raise dispatch.UnknownBackendError(
            f"backend {name!r} is not loaded, so it cannot be certified; loaded: "
            f"{', '.join(sorted(dispatch.backends()))}; load failures: {failures} "
            "(see `python -m dispatch backends`)")
    return loaded


def _reference() -> Backend:
    for loaded in loaded_backends().values():
        if loaded.info.reference:
            return loaded
    raise dispatch.NoBackendError("no reference backend is loaded (the 'torch' backend); nothing to certify against")


def check_case(backend: str, case: Case, *, device: torch.device | str | None = None, configs: str = "all") -> None:
    """Run one case as a pytest test: a refusal skips (with its reason), a failure fails."""
    import pytest

    result = run_case(backend, case, device=device, configs=configs)
    if result.outcome == REFUSED:
        pytest.skip(f"{backend} refused: {result.reason}")
    if result.outcome == FAIL:
        pytest.fail(f"{backend} fails conformance case {case.id}: {result.reason}", pytrace=False)


def conformance_tests(backend: str | None = None, cases: Iterable[Case] | None = None, *,
                      device: torch.device | str | None = None, configs: str = "all"):
    """A pytest test function parametrized over ``cases``; assign it to a ``test_*`` name::

        test_sample_conforms = conformance_tests("sample")
        test_every_backend_conforms = conformance_tests()   # over the dispatch_backend fixture

    With no ``backend`` the test takes the ``dispatch_backend`` fixture, so it runs for every
    available backend, or for those named by ``--dispatch-backend``.
    """
    import pytest

    cases = tuple(default_cases() if cases is None else cases)
    parametrize = pytest.mark.parametrize("conformance_case", cases, ids=[c.id for c in cases])
    if backend is None:
        @parametrize
        def test_conformance(dispatch_backend: str, conformance_case: Case) -> None:
            check_case(dispatch_backend, conformance_case, device=device, configs=configs)
    else:
        @parametrize
        def test_conformance(conformance_case: Case) -> None:
            check_case(backend, conformance_case, device=device, configs=configs)
    return test_conformance
