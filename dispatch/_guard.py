"""Guarded kernels: a backend's first call checked against the reference, and quarantine after its faults.

A kernel backend's resolved call runs its kernel guarded (:meth:`Guard._guarded`): a kernel that
raises is a fault of its backend and the call is served again, and a lazily negated or conjugated
view is resolved first (kernels read raw memory). Its first call on a bucket runs next to the
reference (:meth:`Guard._validate`), and its own backward kernel is guarded as its forward is
(:meth:`Guard._guarded_backward`). A fault quarantines the backend for the call's bucket with a
FaultWarning, or is a BackendFaultError where the call forced it or strict mode is on
(:meth:`Guard._fault`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from . import _opdecl, _plugins, _settings
from ._autograd import TORCHS_OWN, own_backward, reference_backward
from ._keys import spec_key
from ._modes import _refuse_if_forced, _torch_only
from ._select import Decision
from ._spec import CallSpec
from .errors import BackendFaultError, FaultWarning
from .reference import (_overlaps, check_declared_output, check_output, expected_output, gradients_problem,
                        input_safety, result_problem, tolerance_of)


class Guard:
    """The guard of the kernels the dispatcher resolves (a part of :class:`dispatch._dispatcher.Dispatcher`):
    it keeps the dispatcher's ``_validated`` and ``_quarantine``, drops a faulted key from its
    ``tables`` and ``decisions``, and serves the call again through its ``call``."""

    def _backward(self, backend, decision: Decision, key) -> Callable:
        """The backward a call of ``decision`` gets: its backend's own backward kernel, guarded
        (:meth:`_guarded_backward`), else the op's reference backward."""
        own = own_backward(backend, decision.spec)
        return reference_backward(decision.spec) if own is None else self._guarded_backward(own, decision, key)

    def _guarded_backward(self, own: Callable, decision: Decision, key) -> Callable:
        """A backend's own backward kernel, guarded as its forward is: one that raises, or whose
        first answer is not one gradient per wanted input of its shape and device, is a fault of
        the backend (quarantined for the key, a FaultWarning; forced or strict: a
        BackendFaultError), and from then on the op's reference backward gives the gradients."""
        spec = decision.spec
        n = len(spec.tensors)
        needed = tuple(t.name if t.requires_grad else None for t in spec.tensors)
        checked = broken = False

        def backward(grad, *saved):  # saved: the inputs (None where absent), the output, the forward's buffers
            nonlocal checked, broken
            if not broken:
                error = None
                try:
                    if checked:
                        grads = own(grad, *saved)
                        why = None
                    elif grad.is_cuda and torch.cuda.is_current_stream_capturing():  # nothing may sync: shapes only
                        grads = own(grad, *saved)
                        why = gradients_problem(grads, saved[:n], needed)
                    else:  # its first answer, on copies: one that writes into the gradient or the forward's
                        # tensors (the user's) is a fault, as a forward kernel writing into its input is
                        theirs = (grad, *saved[:n + 1])
                        copies = tuple(None if t is None else _opdecl.with_strides(t.detach(), t.stride())
                                       for t in theirs)
                        grads = own(*copies, *saved[n + 1:])
                        unsafe = input_safety(copies, theirs, None)  # (writes only: a gradient may be grad_output)
                        why = (f"its backward kernel {unsafe} (its grad_output, an input or the forward's output)"
                               if unsafe else gradients_problem(grads, saved[:n], needed))
                except KeyboardInterrupt:
                    raise
                except BaseException as exc:  # SystemExit included: a backward kernel can't end the process
                    why, error = f"its backward kernel raised {type(exc).__name__}: {exc}", exc
                if why is None:
                    checked = True
                    return grads
                broken = True
                self._fault(decision, why, error)
                if key is not None:  # the next call resolves again, without this backend
                    self.tables.get(spec.op, {}).pop(key, None)
                    self.decisions.get(spec.op, {}).pop(key, None)
            return reference_backward(spec)(grad, *saved[:n + 1])

        if hasattr(own, "saves"):  # the buffers its forward fills for it (hookspec)
            backward.saves = own.saves
        if not getattr(own, "reads_output", True):  # (nor does the reference's backward, its fallback)
            backward.reads_output = False
        return backward

    def _guarded(self, kernel, decision: Decision, key, plain: bool = False):
        """``kernel`` with two things added per call: a kernel that raises is quarantined for the
        key and the call served again; and, unless ``plain`` (the key says that none of the call's
        tensors is such a view: see :meth:`Dispatcher.call`), a lazily negated (or, for complex dtypes,
        conjugated) view is resolved first (kernels read raw memory). A conjugate bit exists only
        on complex tensors, so calls of real dtypes check the negation bit alone; a one-tensor op
        gets wrappers without a loop (the common hot path)."""
        tensors_spec = decision.spec.tensors
        complex_ = any(t.present and t.dtype.is_complex for t in tensors_spec)
        if decision.forced:  # a kernel backend (the reference is never guarded): raises
            def reference(*_: torch.Tensor) -> torch.Tensor:
                _refuse_if_forced(decision.spec, decision.backend)
                raise AssertionError(f"{decision.backend!r} forced under a mode that runs torch's op")
        else:  # under a mode of _torch_only
            reference = _opdecl.get(decision.spec.op).reference(decision.spec)

        def fault(exc: BaseException, tensors: tuple) -> torch.Tensor:
            if getattr(exc, TORCHS_OWN, False):  # torch's own op raised for the call: its error, no fault
                raise exc
            return self._fault_and_rerun(decision, key, f"raised {type(exc).__name__}: {exc}", tensors, exc, plain)

        if len(tensors_spec) == 1:
            def run(x: torch.Tensor) -> torch.Tensor:
                if _torch_only():
                    return reference(x)
                try:
                    return kernel(x)
                except KeyboardInterrupt:
                    raise
                except BaseException as exc:  # SystemExit included: a kernel cannot end the process
                    return fault(exc, (x,))
        else:
            def run(*tensors: torch.Tensor) -> torch.Tensor:
                if _torch_only():
                    return reference(*tensors)
                try:
                    return kernel(*tensors)
                except KeyboardInterrupt:
                    raise
                except BaseException as exc:  # SystemExit included: a kernel cannot end the process
                    return fault(exc, tensors)
        if plain:
            guarded = run
        elif len(tensors_spec) == 1 and not complex_:
            def guarded(x: torch.Tensor) -> torch.Tensor:
                if x.is_neg():
                    x = _opdecl.with_strides(x, x.stride())  # a new tensor: the user's view is untouched
                return run(x)
        else:
            def guarded(*tensors: torch.Tensor) -> torch.Tensor:
                for t in tensors:
                    if t is not None and (t.is_neg() or (complex_ and t.is_conj())):
                        tensors = _resolved(tensors)
                        break
                return run(*tensors)
        guarded.__wrapped__ = kernel
        return guarded

    def _validate(self, decision: Decision, fn, tensors: tuple) -> Any:
        """Run a non-reference backend's first call on this bucket next to the reference.

        The reference runs first, on the user's inputs (torch never writes to them); the backend
        runs on copies, so a kernel that writes into its input can't corrupt the user's tensors
        or the reference. A kernel that wrote into its input, returned an alias of it, raised or
        differs from the reference is quarantined for the key.

        The reference backend's own first call on the key is held to the op's ``output`` rule
        (so is the reference's shape here): a TypeError naming ``OpDecl.output`` where they differ.

        Returns the output, ``_RUN_AGAIN`` when the call must be made again (grad mode, or a
        validated key), or None when the backend faulted (selection then runs again).
        """
        registry = _plugins.registry()
        backend = registry.backends[decision.backend]
        spec = decision.spec
        vkey = (decision.backend, decision.config, _bucket_key(spec), spec.input.dense)
        if vkey in self._validated:
            return _RUN_AGAIN
        if backend.info.reference:  # torch's ops on the user's tensors, held to the op's output rule once
            out = fn(*tensors)
            check_declared_output(spec, out)
            self._validated.add(vkey)
            return out
        kernel = getattr(fn, "__wrapped__", fn)
        tolerance_of(spec)  # (the op's own: a TypeError naming OpDecl.tolerance, not the backend's fault)
        with torch.no_grad():  # (the reference's errors are the call's, not the backend's)
            expected = expected_output(spec, tensors) if _has_reference(registry) else None
        if expected is not None:  # (computed wide, then cast: its shape is the reference's)
            check_declared_output(spec, expected, dtype=False)
        try:
            with torch.no_grad():
                copies = tuple(None if t is None else _opdecl.with_strides(t.detach(), t.stride()) for t in tensors)
                out = kernel(*copies)
                # twice: a kernel that hands back one buffer it keeps would change a result the caller holds
                again = kernel(*copies) if isinstance(out, torch.Tensor) and out.numel() else None
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # SystemExit included: a kernel cannot end the process
            self._fault(decision, f"raised {type(exc).__name__}: {exc}", exc)
            return None
        try:
            why = input_safety(copies, tensors, out) or result_problem(out)
            if why is None and expected is not None:
                why = check_output(spec, out, expected, tensors)
                why = None if why is None else f"differs from the reference: {why}"
            if why is None and isinstance(again, torch.Tensor) and again.numel() and again.device.type != "meta" \
                    and again.layout == torch.strided and _overlaps(again, out):
                why = ("returned the same memory from two calls (a buffer it keeps and writes again: the next call "
                       "would change a result the caller still holds); a kernel returns a new tensor each call")
        except Exception as exc:  # a result the checks can't read (of a tensor type torch can't copy, say)
            why = f"returned a result that could not be checked ({type(exc).__name__}: {exc})"
        if why is not None:
            self._fault(decision, why, None)
            return None
        self._validated.add(vkey)
        return _RUN_AGAIN if spec.requires_grad else out

    # -- faults ----------------------------------------------------------------------------------

    def _fault(self, decision: Decision, what: str, exc: BaseException | None, hook: str | None = None) -> None:
        """``decision``'s backend faulted (``what``; in its hook ``hook``, or None: in its kernel):
        raised as a :class:`BackendFaultError` where the call forced it or strict mode is on, else
        quarantined for the call's bucket with a :class:`FaultWarning`."""
        spec = decision.spec
        message = f"backend {decision.backend!r} {what} on {spec.describe()} (bucket {decision.bucket})"
        if _settings.settings().strict or decision.forced:
            why = ("it was forced, so no other backend serves this call" if decision.forced
                   else "strict mode forbids falling back")
            raise BackendFaultError(f"{message}; {why}", backend=decision.backend, hook=hook, op=spec.op) from exc
        qkey = _bucket_key(spec)
        bucket = self._quarantine.setdefault(qkey, {})
        if decision.backend not in bucket:
            bucket[decision.backend] = what
            warnings.warn(f"{message}; it is quarantined for this key and the next backend serves it", FaultWarning,
                          stacklevel=4)

    def _fault_and_rerun(self, decision: Decision, key, what: str, tensors: tuple,
                         exc: BaseException, views_keyed: bool = False) -> torch.Tensor:
        self._fault(decision, what, exc)
        op = decision.spec.op
        if key is not None:
            self.tables.get(op, {}).pop(key, None)
            self.decisions.get(op, {}).pop(key, None)
        forced = None  # a forced backend raised above: only chosen backends fall back
        return self.call(op, key, decision.spec, forced, tensors, views_keyed)


_RUN_AGAIN = object()


def _has_views(tensors: tuple) -> bool:
    """Whether any of ``tensors`` is a lazily negated or conjugated view (kernels read raw memory)."""
    return any(t is not None and (t.is_neg() or t.is_conj()) for t in tensors)


def _resolved(tensors: tuple) -> tuple:
    """The tensors with their negation and conjugation bits applied: new tensors laid out with the
    same strides (the kernel was built for the call's strides: a view with gaps between its rows
    must not reach it as a dense copy); the user's are untouched."""
    return tuple(None if t is None else _opdecl.with_strides(t, t.stride()) for t in tensors)


def _has_reference(registry) -> bool:
    return any(b.info.reference for b in registry.backends.values())


def _bucket_key(spec: CallSpec) -> tuple:
    """Op, device, dtypes and shape bucket: what quarantine and first-call validation are kept per."""
    return tuple(sorted(spec_key(spec).items()))
