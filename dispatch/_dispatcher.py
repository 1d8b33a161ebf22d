"""Resolved calls: the hot-path tables, first-call validation, and quarantine after faults.

The hot path (in :mod:`dispatch.ops`) is one dictionary lookup keyed by what fixes the decision
(dtype, device, shape, strides, dim, dtype=, backend=, scope, grad mode) and one call. Everything
else happens here, once per new key, under a per-key lock so concurrent first calls resolve once.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import Any

import torch

from . import _plugins, _settings
from ._autograd import differentiable
from ._keys import spec_key
from ._select import Decision, Selector, expected_output
from ._spec import OPS, CallSpec
from .autotune.cache import default_cache
from .errors import BackendFaultError
from .tolerance import mismatch

MAX_KEYS_PER_OP = 4096


class FaultWarning(RuntimeWarning):
    """A backend faulted on a key and was quarantined for it; another backend served the call."""


class Dispatcher:
    def __init__(self) -> None:
        self.tables: dict[str, dict[tuple, Callable[[torch.Tensor], torch.Tensor]]] = {op: {} for op in OPS}
        self.decisions: dict[str, dict[tuple, Decision]] = {op: {} for op in OPS}
        self._key_locks: dict[tuple, threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self._quarantine: dict[tuple, dict[str, str]] = {}
        self._validated: set[tuple] = set()

    def clear(self) -> None:
        """Forget every resolved call (settings or backends changed); quarantines are kept."""
        for table in self.tables.values():
            table.clear()
        for table in self.decisions.values():
            table.clear()
        self._validated.clear()

    def reset(self) -> None:
        """Forget resolved calls and quarantines."""
        self.clear()
        self._quarantine.clear()

    def selector(self) -> Selector:
        return Selector(_plugins.registry(), default_cache(), _settings.settings())

    def _lock_for(self, key: tuple) -> threading.Lock:
        with self._locks_lock:
            lock = self._key_locks.get(key)
            if lock is None:
                lock = self._key_locks[key] = threading.Lock()
            return lock

    # -- resolution ------------------------------------------------------------------------------

    def call(self, op: str, key: tuple, spec: CallSpec, forced: str | None, x: torch.Tensor) -> torch.Tensor:
        """Resolve ``key`` (once, under its lock), validate the backend on this input, and run it."""
        table = self.tables[op]
        with self._lock_for((op, key)):
            fn = table.get(key)
            if fn is not None:
                return fn(x)
            while True:
                decision = self.decide(spec, forced)
                try:
                    fn = self._build(decision, key)
                except Exception as exc:  # dispatch_kernel raised: a fault of that backend, like a crash
                    self._fault(decision, _plugins.raised_in("dispatch_kernel", exc), exc)
                    continue
                out = self._validate(decision, fn, x)
                if out is not None:
                    break
            if len(table) >= MAX_KEYS_PER_OP:  # many distinct shapes: start over rather than grow
                table.clear()
                self.decisions[op].clear()
                with self._locks_lock:
                    self._key_locks = {k: v for k, v in self._key_locks.items() if k[0] != op or k[1] == key}
            table[key] = fn
            self.decisions[op][key] = decision
        return out if out is not _RUN_AGAIN else fn(x)

    def decide(self, spec: CallSpec, forced: str | None) -> Decision:
        qkey = _bucket_key(spec)
        return self.selector().select(spec, forced, _settings.current_scope(), self._quarantine.get(qkey))

    def _build(self, decision: Decision, key: tuple) -> Callable[[torch.Tensor], torch.Tensor]:
        backend = _plugins.registry().backends[decision.backend]
        spec = decision.spec
        kernel = backend.kernel(spec.op, spec, decision.config)
        if backend.info.reference:
            return kernel  # torch's own ops: autograd and errors are torch's
        if spec.requires_grad:
            kernel = differentiable(kernel, backend.backward(spec.op, spec), spec)
        return self._guarded(kernel, decision, key)

    def _guarded(self, kernel, decision: Decision, key: tuple):
        def guarded(x: torch.Tensor) -> torch.Tensor:
            try:
                return kernel(x)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # SystemExit included: a kernel cannot end the process
                return self._fault_and_rerun(decision, key, f"raised {type(exc).__name__}: {exc}", x, exc)
        guarded.__wrapped__ = kernel
        return guarded

    def _validate(self, decision: Decision, fn, x: torch.Tensor) -> Any:
        """Run a non-reference backend's first call on this bucket next to the reference.

        Returns the output, ``_RUN_AGAIN`` when the call must be made again (grad mode), or None
        when the backend faulted (it is then quarantined for the key and selection runs again).
        """
        registry = _plugins.registry()
        backend = registry.backends[decision.backend]
        spec = decision.spec
        vkey = (decision.backend, decision.config, _bucket_key(spec), spec.stride == _contig(spec))
        if backend.info.reference or vkey in self._validated:
            return _RUN_AGAIN
        reference = next((b for b in registry.backends.values() if b.info.reference), None)
        kernel = getattr(fn, "__wrapped__", fn)
        try:
            with torch.no_grad():
                out = kernel(x)
                why = None
                if reference is not None:
                    why = mismatch(out, expected_output(reference, spec, x))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # SystemExit included: a kernel cannot end the process
            self._fault(decision, f"raised {type(exc).__name__}: {exc}", exc)
            return None
        if why is not None:
            self._fault(decision, f"differs from the reference: {why}", None)
            return None
        self._validated.add(vkey)
        return _RUN_AGAIN if spec.requires_grad else out

    # -- faults ----------------------------------------------------------------------------------

    def _fault(self, decision: Decision, what: str, exc: BaseException | None) -> None:
        spec = decision.spec
        message = (f"backend {decision.backend!r} {what} on {spec.describe()} "
                   f"(bucket {decision.bucket}); it is quarantined for this key")
        if _settings.settings().strict or decision.forced:
            raise BackendFaultError(message + ("" if not _settings.settings().strict
                                               else "; strict mode forbids falling back"),
                                    backend=decision.backend, op=spec.op) from exc
        qkey = _bucket_key(spec)
        bucket = self._quarantine.setdefault(qkey, {})
        if decision.backend not in bucket:
            bucket[decision.backend] = what
            warnings.warn(message + " and the next backend serves it", FaultWarning, stacklevel=4)

    def _fault_and_rerun(self, decision: Decision, key: tuple, what: str, x: torch.Tensor,
                         exc: BaseException) -> torch.Tensor:
        self._fault(decision, what, exc)
        op = decision.spec.op
        self.tables[op].pop(key, None)
        self.decisions[op].pop(key, None)
        forced = None  # a forced backend raised above: only chosen backends fall back
        return self.call(op, key, decision.spec, forced, x)

    def quarantined(self) -> dict[tuple, dict[str, str]]:
        return {k: dict(v) for k, v in self._quarantine.items()}


_RUN_AGAIN = object()


def _contig(spec: CallSpec) -> tuple[int, ...]:
    stride, acc = [], 1
    for size in reversed(spec.shape):
        stride.append(acc)
        acc *= max(size, 1)
    return tuple(reversed(stride))


def _bucket_key(spec: CallSpec) -> tuple:
    """Op, device, dtypes and shape bucket: what quarantine and first-call validation are kept per."""
    return tuple(sorted(spec_key(spec).items()))


DISPATCHER = Dispatcher()
_settings.on_change(DISPATCHER.clear)
_plugins.on_change(DISPATCHER.clear)
