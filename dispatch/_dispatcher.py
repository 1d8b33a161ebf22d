"""Resolved calls: the hot-path tables, and each new key resolved once, under its lock.

The hot path (an op function made by :mod:`dispatch._opfunc`) is one dictionary lookup keyed by
what fixes the decision and one call. Everything else happens here, once per new key, under a
per-key lock so concurrent first calls resolve once. No kernel runs while a lock is held by its
caller's thread in a way that could re-enter it: a faulting kernel's retry resolves the key anew
after the lock is released, and a kernel run to check or race a key that calls that same key
(which would wait on the lock its thread holds) gets a PluginError, a fault of its backend.

A kernel backend's resolved call runs guarded: checked against the reference on its first call
and quarantined after a fault (:mod:`dispatch._guard`). A call under autocast whose kernel reads its
half-precision input resolves under a key of its own (:mod:`dispatch._autocast_in_kernel`), and
what a compiled graph's nodes run is chosen and kept apart (:mod:`dispatch._compiled_nodes`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs
import torch

from . import _autocast, _backend, _opdecl, _plugins, _settings
from ._autocast_in_kernel import AutocastInKernel
from ._autograd import differentiable
from ._compiled_nodes import CompiledNodes
from ._guard import _RUN_AGAIN, Guard, _bucket_key, _has_views, _resolved
from ._keys import MAX_KEYS_PER_OP
from ._modes import _refuse_if_forced, _torch_only, _tracing
from ._opfunc import OpFunction
from ._select import Decision, Selector
from ._spec import CallSpec
from .autotune.cache import default_cache
from .errors import BackendRefusedError, PluginError

_tune_log = logging.getLogger("dispatch.tune")


def _tensor_attribute(decl: _opdecl.OpDecl, values: dict[str, Any]) -> bool:
    """Whether a tensor stands for a number among the call's attributes (``eps=torch.tensor(1e-5)``,
    ``normalized_shape=[torch.tensor(8)]``): such a call is resolved each time, never stored under a
    key, which would hold the tensor by identity (its value changed in place would go unseen)."""
    for name in decl.attribute_names:
        v = values.get(name)
        if isinstance(v, torch.Tensor) or (isinstance(v, (list, tuple))
                                           and any(isinstance(e, torch.Tensor) for e in v)):
            return True
    return False


class Dispatcher(AutocastInKernel, CompiledNodes, Guard):
    def __init__(self) -> None:
        self.tables: dict[str, dict[tuple, Callable[..., torch.Tensor]]] = {}
        self.decisions: dict[str, dict[tuple, Decision]] = {}
        self.functions: dict[str, OpFunction] = {}
        self._key_locks: dict[tuple, threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self._quarantine: dict[tuple, dict[str, str]] = {}
        self._validated: set[tuple] = set()
        self._backwards: dict[tuple, tuple[Decision, Callable]] = {}  # (spec, forced, scope) -> (decision, backward)
        self._savings: dict[tuple, tuple] = {}  # a compiled forward node's call -> its plan (saving_forward)

    def clear(self) -> None:
        """Forget every resolved call (settings or backends changed); quarantines are kept."""
        for table in self.tables.values():
            table.clear()
        for table in self.decisions.values():
            table.clear()
        self._validated.clear()
        self._backwards.clear()
        self._savings.clear()

    def reset(self) -> None:
        """Forget resolved calls and quarantines."""
        self.clear()
        self._quarantine.clear()

    def selector(self, scope: _settings.Scope | None = None, spec: CallSpec | None = None) -> Selector:
        """A selector with the settings in force in ``scope`` (its timing, where it sets one); with
        ``spec``, a tune it runs for that call says so when it runs long (:class:`_TuneNotice`)."""
        settings = _settings.effective(scope)
        notice = _TuneNotice(spec) if spec is not None and settings.autotune else None
        return Selector(_plugins.registry(), default_cache(), settings, progress=notice)

    def function(self, op: str) -> OpFunction:
        """The op function of declared op ``op`` (made once)."""
        fn = self.functions.get(op)
        if fn is None or fn.decl is not _opdecl.find(op):  # (an op declared anew under its name)
            if op not in _opdecl.declared():
                _plugins.registry()  # plugins may declare it
            decl = _opdecl.get(op)
            with self._locks_lock:
                fn = self.functions.get(op)
                if fn is None or fn.decl is not decl:
                    table = self.tables.setdefault(op, {})
                    table.clear()
                    self.decisions.setdefault(op, {}).clear()
                    fn = self.functions[op] = OpFunction(decl, table, self.miss)
        return fn

    def python_key_function(self, op: str) -> Callable[..., torch.Tensor]:
        """``dispatch.<op>`` with its call key computed in Python even where the native key is built
        (what a process gets where it can't be), sharing the resolved calls of the op: for timing
        the two keys side by side."""
        from . import _native

        decl = self.function(op).decl
        with _native.python_key():
            return OpFunction(decl, self.tables.setdefault(op, {}), self.miss).function

    def _lock_for(self, key: tuple) -> threading.Lock:
        with self._locks_lock:
            lock = self._key_locks.get(key)
            if lock is None:
                lock = self._key_locks[key] = threading.Lock()
            return lock

    # -- resolution ------------------------------------------------------------------------------

    def miss(self, decl: _opdecl.OpDecl, key_fn, backend, values: dict[str, Any]) -> torch.Tensor:
        """A call whose key is not resolved yet: check its arguments (torch's errors), resolve, run."""
        check_backend_arg(backend)
        try:
            key = key_fn(**values, backend=backend)
            fn = self.tables.get(decl.name, {}).get(key)
        except (AttributeError, TypeError, RuntimeError):  # an argument we can't key on: resolve each call
            key = fn = None
        if fn is not None:  # resolved under its canonical key (a list or tuple argument)
            return fn(*decl.tensors_of(values))
        overriding = _opdecl.overriders(decl.tensors_of(values))
        if overriding:  # an object that overrides torch's functions, not a tensor: its __torch_function__ serves
            kwargs = values if backend is None else {**values, "backend": backend}
            return torch.overrides.handle_torch_function(self.function(decl.name).function, overriding, **kwargs)
        if key is not None and _tensor_attribute(decl, values):  # keyed by identity, its value could change
            key = None  # (never stored, so never found above)
        views_keyed = getattr(key_fn, "views_keyed", False)
        recast = _autocast.recast(decl, values) if decl.autocast else None
        if recast is not None:  # under torch.autocast: served as the call torch makes (float32)
            kept = None if _tracing() else _autocast.in_kernel(decl, values, recast)
            if kept is not None:  # the kernel reads the half-precision input and writes float32
                fn = self._autocast_in_kernel(decl, key, values, kept, backend, views_keyed)
            else:
                fn = _autocast.through(self.function(decl.name).function, decl, recast,
                                       _autocast.cast_of(decl, values, recast), backend)
            if key is not None and not _tracing():
                self.tables.setdefault(decl.name, {})[key] = fn
            return fn(*decl.tensors_of(values))
        if _tracing():  # torch.export (non-strict) or a trace: one custom-op node, not a kernel on fake tensors
            from . import _compile

            return _compile.call(decl, values, backend)
        return self._serve(decl, key, decl.spec(values), backend, decl.tensors_of(values), views_keyed)

    def _serve(self, decl: _opdecl.OpDecl, key, spec: CallSpec, backend: str | None, tensors: tuple,
               views_keyed: bool) -> torch.Tensor:
        """Serve a call of ``spec`` that is not resolved under ``key``: torch's op where a mode or a
        Tensor subclass asks for it, else the chosen backend (resolved under ``key``)."""
        if _torch_only():  # served by torch, and not resolved: later calls outside the mode still choose
            scope = _settings.current_scope()
            forced_name = backend or (scope.backend if scope else None) or _settings.effective(scope).backend
            if forced_name is not None:
                _refuse_if_forced(spec, forced_name)
            return decl.reference(spec)(*tensors)
        subclass = next((type(t) for t in tensors if t is not None and type(t) not in _PLAIN_TENSORS), None)
        forced = _plugins.registry().backends.get(backend) if backend is not None else None
        if subclass is not None and (backend is None or forced is not None):  # (an unknown name: said below)
            # its __torch_function__ and its class are torch's to honour
            if forced is not None and not forced.info.reference:
                raise BackendRefusedError(
                    f"backend {backend!r} was forced but cannot serve {spec.describe()}: an input of the Tensor "
                    f"subclass {subclass.__name__} runs torch's own op (its overrides and its class are kept); "
                    "call without backend=, or pass a plain tensor", backend=backend, op=spec.op,
                    reason=f"an input of the Tensor subclass {subclass.__name__}", servers=("torch",))
            fn = decl.reference(spec)
            if key is not None:  # (its class is in the key: plain tensors of the call resolve apart)
                self.tables.setdefault(decl.name, {})[key] = fn
            return fn(*tensors)
        if spec.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return self._call_in_capture(spec, key, backend, tensors)
        return self.call(decl.name, key, spec, backend, tensors, views_keyed=views_keyed)

    def _call_in_capture(self, spec: CallSpec, key, forced: str | None, tensors: tuple) -> torch.Tensor:
        """A key met for the first time while a CUDA graph is captured: nothing may sync or run
        beside the call, so it is neither tuned nor checked against the reference. It gets the
        cached or default choice (tuning off), is not kept as resolved (the next eager call
        resolves and checks it), and explain says so."""
        selector = Selector(_plugins.registry(), default_cache(), attrs.evolve(_settings.effective(), autotune=False))
        qkey = _bucket_key(spec)
        decision = selector.select(spec, forced, _settings.current_scope(), self._quarantine.get(qkey))
        decision = attrs.evolve(decision, reason=decision.reason + "; met first during CUDA-graph capture: "
                                "not tuned and not checked against the reference (an eager call of this "
                                "key resolves and checks it)")
        backend = _plugins.registry().backends[decision.backend]
        kernel = backend.kernel(spec.op, spec, decision.config)
        if spec.requires_grad and not backend.info.reference:
            kernel = differentiable(kernel, self._backward(backend, decision, None), spec)
        if key is not None:
            self.decisions.setdefault(spec.op, {})[key] = decision
        if not backend.info.reference and _has_views(tensors):
            tensors = _resolved(tensors)  # kernels read raw memory (the user's views are untouched)
        return kernel(*tensors)

    def call(self, op: str, key: tuple | None, spec: CallSpec, forced: str | None,
             tensors: tuple, views_keyed: bool = False) -> torch.Tensor:
        """Resolve ``key`` (once, under its lock), validate the backend on this input, and run it.

        Kernels run outside the lock, so a kernel that faults and is retried never waits on a lock
        its own thread holds. ``views_keyed``: the key was made by a key function that keys
        negated and conjugated views apart (the native key's ``views_keyed``).
        """
        table = self.tables.setdefault(op, {})
        decisions = self.decisions.setdefault(op, {})
        resolving = _resolving()
        if key is not None and (op, key) in resolving:  # a kernel (or hook) run to resolve this call made it
            raise PluginError(f"{spec.describe()} was called again from within its own resolution (by a kernel "
                              "or hook of the backend being checked or raced for it); a kernel serves its call "
                              "itself, or calls another op or backend")
        lock = self._lock_for((op, key)) if key is not None else threading.Lock()
        with lock:
            fn = table.get(key) if key is not None else None
            if fn is None:
                plain = views_keyed and key is not None and not _has_views(tensors)
                resolving.add((op, key))
                try:
                    fn, out, decision = self._resolve(spec, forced, key, tensors, plain)
                finally:
                    resolving.discard((op, key))
                if key is not None:
                    if len(table) >= MAX_KEYS_PER_OP:  # many distinct shapes: start over rather than grow
                        table.clear()
                        decisions.clear()
                        with self._locks_lock:
                            self._key_locks = {k: v for k, v in self._key_locks.items()
                                               if k[0] != op or k[1] == key}
                    table[key] = fn
                    decisions[key] = decision
                if out is not _RUN_AGAIN:
                    return out
        return fn(*tensors)

    def _resolve(self, spec: CallSpec, forced: str | None, key, tensors: tuple, plain: bool = False):
        while True:
            try:
                decision = self.decide(spec, forced)
            except BackendRefusedError as exc:
                _raise_torchs_own(spec, tensors, exc)
                raise
            try:
                fn = self._build(decision, key, plain)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # dispatch_kernel or dispatch_backward raised (or exited)
                backend = _plugins.registry().backends.get(decision.backend)  # (None: its hook unregistered it)
                fault = backend.fault_of(exc) if backend is not None else None
                hook = fault.hook if fault else "dispatch_kernel"
                self._fault(decision, _backend.raised_in(hook, exc), exc, hook)
                continue
            out = self._validate(decision, fn, tensors)
            if out is not None:
                return fn, out, decision

    def decide(self, spec: CallSpec, forced: str | None) -> Decision:
        qkey = _bucket_key(spec)
        scope = _settings.current_scope()
        return self.selector(scope, spec).select(spec, forced, scope, self._quarantine.get(qkey))

    def _build(self, decision: Decision, key, plain: bool = False) -> Callable[..., torch.Tensor]:
        backend = _plugins.registry().backends.get(decision.backend)
        if backend is None:  # (one of its own hooks, or another thread, unregistered it since it was chosen)
            raise PluginError(f"backend {decision.backend!r} was unregistered while the call was being resolved")
        spec = decision.spec
        kernel = backend.kernel(spec.op, spec, decision.config)
        if backend.info.reference:
            return kernel  # torch's own ops: autograd and errors are torch's
        if spec.requires_grad:
            kernel = differentiable(kernel, self._backward(backend, decision, key), spec)
        return self._guarded(kernel, decision, key, plain)


class _TuneNotice:
    """The progress of a tune that a call runs (``autotune=True``): silent for its first
    ``AFTER_S`` seconds, then a line on the ``dispatch.tune`` logger at WARNING (shown on stderr
    unless logging is set up otherwise) at the tune's next step, and at the first step of every
    ``EVERY_S`` seconds after, while the call waits (a step is a config compiled or timed)."""

    AFTER_S = 5.0
    EVERY_S = 30.0

    def __init__(self, spec: CallSpec) -> None:
        self.spec = spec
        self.start = time.monotonic()
        self.due = self.start + self.AFTER_S
        self.steps = 0

    def __call__(self, event: str) -> None:
        self.steps += 1
        now = time.monotonic()
        if now < self.due:
            return
        self.due = now + self.EVERY_S
        _tune_log.warning("tuning %s for this call: %.0f s so far, %d steps (now: %s); the result is cached, so "
                          "later calls of its shape bucket don't wait (tune ahead: `python -m dispatch tune`, or "
                          "configure(autotune=False))", self.spec.describe(), now - self.start, self.steps, event)


_thread = threading.local()


def _resolving() -> set:
    """The (op, key) pairs this thread is resolving: a call of one of them from a kernel run to check
    or race it would wait on the lock its own thread holds."""
    try:
        return _thread.resolving
    except AttributeError:
        _thread.resolving = set()
        return _thread.resolving


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)  # the classes a kernel's output may stand for


def check_backend_arg(backend: Any) -> None:
    """A call's ``backend=``: a backend name or None, else a TypeError that says so."""
    if backend is not None and (not isinstance(backend, str) or not backend):
        raise TypeError(f"'backend' must be a backend name (a non-empty str) or None (got {backend!r})")


def _raise_torchs_own(spec: CallSpec, tensors: tuple, refused: BackendRefusedError) -> None:
    """A forced backend refused a call that only the reference would serve: where torch's op itself
    refuses it (an integer input to softmax, a float64 weight of a float32 layer_norm), torch's
    error is raised, as the call without ``backend=`` raises it; else nothing."""
    registry = _plugins.registry()
    backends = [registry.backends.get(name) for name in refused.servers]
    if not backends or not all(b is not None and b.info.reference for b in backends):
        return
    with torch.no_grad():
        _opdecl.get(spec.op).reference(spec)(*tensors)  # raises torch's error, or returns: then the refusal stands


DISPATCHER = Dispatcher()
_settings.on_change(DISPATCHER.clear)
_plugins.on_change(DISPATCHER.clear)
