"""A loaded backend: its card and its hooks, each called guarded (faults recorded, answers checked)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from attrs import frozen

from ._spec import BackendInfo, CallSpec, Verdict
from .autotune.entries import EntryError, check_tune
from .autotune.space import EMPTY, Config, Failure, TuneResult, TuneSettings, TuneSpace
from .errors import BackendFaultError, PluginError


@frozen
class Fault:
    """A hook that raised: which backend, which hook, what error."""

    backend: str
    hook: str
    error: str


class Backend:
    """A loaded backend: its card and its hooks, called directly and guarded.

    ``check`` never raises (a raising hook is a refusal with the error as its reason, and a
    recorded fault); the other hooks raise what the plugin raised, after recording it, except that
    a BaseException which is not an Exception (``SystemExit``, say) becomes a :class:`PluginError`:
    a plugin cannot end the process. A ``KeyboardInterrupt`` (Ctrl-C) passes through.
    """

    def __init__(self, info: BackendInfo, plugin: object, hooks: Mapping[str, Callable[..., Any]]) -> None:
        self.info = info
        self.plugin = plugin
        self._hooks = dict(hooks)
        self.faults: list[Fault] = []
        self._last_raised: tuple[BaseException, Fault] | None = None  # until fault_of asks for it

    @property
    def name(self) -> str:
        return self.info.name

    def __repr__(self) -> str:
        return f"<Backend {self.name} {self.info.version}>"

    def _record(self, hook: str, exc: BaseException) -> None:
        fault = Fault(self.name, hook, f"{type(exc).__name__}: {exc}")
        self.faults.append(fault)
        self._last_raised = (exc, fault)

    def _malformed(self, hook: str, answer: object, expected: str) -> PluginError:
        """Record and return the error for a hook that answered with the wrong type."""
        error = PluginError(f"backend {self.name!r}: {hook} returned {answer!r} ({type(answer).__name__}); "
                            f"it must return {expected}")
        self._record(hook, error)
        return error

    def fault_of(self, exc: BaseException) -> Fault | None:
        """The hook fault that ``exc`` (or the exception it was raised from) stands for, if it is the
        last one recorded; asked once, where the hook's error arrives (only the last one is kept)."""
        last, self._last_raised = self._last_raised, None
        while exc is not None and last is not None:
            if last[0] is exc:
                return last[1]
            exc = exc.__cause__
        return None

    def check(self, op: str, spec: CallSpec) -> Verdict:
        if op not in self.info.ops and not self.info.reference:
            return Verdict.no(f"does not implement {op} (it implements {', '.join(sorted(self.info.ops))})")
        if not self.info.available:
            return Verdict.no(f"unavailable here: {self.info.available.reason}")
        try:
            verdict = self._hooks["dispatch_check"](op=op, spec=spec)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            self._record("dispatch_check", exc)
            return Verdict.no(f"dispatch_check raised {type(exc).__name__}: {exc}")
        if not isinstance(verdict, Verdict):
            self._malformed("dispatch_check", verdict, "a dispatch.Verdict (Verdict.yes() or Verdict.no(reason))")
            return Verdict.no(f"dispatch_check returned {type(verdict).__name__}, not a Verdict (plugin bug)")
        return verdict

    def _call(self, hook: str, **kwargs: Any) -> Any:
        fn = self._hooks.get(hook)
        if fn is None:
            return None
        try:
            return fn(**kwargs)
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            self._record(hook, exc)
            raise
        except BaseException as exc:
            self._record(hook, exc)
            raise contained(exc, f"backend {self.name!r}: {hook}") from exc

    def kernel(self, op: str, spec: CallSpec, config: Config = EMPTY) -> Callable:
        fn = self._call("dispatch_kernel", op=op, spec=spec, config=config)
        if not callable(fn):
            raise self._malformed("dispatch_kernel", fn, f"a callable kernel for {op}")
        return fn

    def tune_space(self, op: str, spec: CallSpec) -> TuneSpace | None:
        space = self._call("dispatch_tune_space", op=op, spec=spec)
        if space is not None and not isinstance(space, TuneSpace):
            raise self._malformed("dispatch_tune_space", space, "a dispatch.autotune.TuneSpace or None")
        return space

    def precompile(self, op: str, spec: CallSpec, configs: tuple[Config, ...]) -> tuple[Failure, ...] | None:
        """The backend's ahead-of-timing compile of ``configs`` (None: it compiles nothing ahead)."""
        failed = self._call("dispatch_precompile", op=op, spec=spec, configs=tuple(configs))
        if failed is None:
            return None
        answer = failed
        try:
            failed = tuple(failed) if not isinstance(failed, (str, bytes)) else (failed,)
        except TypeError:
            failed = (failed,)
        if not all(isinstance(f, Failure) for f in failed):
            raise self._malformed("dispatch_precompile", answer, "dispatch.backend.Failure records or None")
        return failed

    def native_tune(self, op: str, spec: CallSpec, space: TuneSpace, example: tuple,
                    settings: TuneSettings) -> TuneResult | None:
        result = self._call("dispatch_native_tune", op=op, spec=spec, space=space, example=example,
                            settings=settings)
        if result is not None and not isinstance(result, TuneResult):
            raise self._malformed("dispatch_native_tune", result, "a dispatch.autotune.TuneResult or None")
        if result is not None:
            try:  # what the cache will store: finite times >= 0
                check_tune(result.to_json())
            except EntryError as exc:
                self._record("dispatch_native_tune", PluginError(
                    f"backend {self.name!r}: dispatch_native_tune returned a result the cache can't keep: {exc}; "
                    "dispatch's sweep tuned the space instead"))
                return None
        if result is not None and result.config not in space.configs:  # (cached, it would be refused as stale)
            # recorded against the hook, and dispatch's own sweep tunes the space instead (a DSL's
            # autotuner keyed more coarsely than the space, say, may hand back another call's winner)
            self._record("dispatch_native_tune", PluginError(
                f"backend {self.name!r}: dispatch_native_tune returned config {result.config}, which is not in the "
                f"tune space it was given ({', '.join(map(str, space.configs[:4]))}"
                f"{', ...' if len(space.configs) > 4 else ''}); dispatch's sweep tuned the space instead"))
            return None
        return result

    def backward(self, op: str, spec: CallSpec) -> Callable | None:
        fn = self._call("dispatch_backward", op=op, spec=spec)
        if fn is not None and not callable(fn):
            raise self._malformed("dispatch_backward", fn, f"a callable backward kernel for {op}, or None")
        return fn


def contained(exc: BaseException, where: str) -> PluginError:
    """The error that stands for a plugin's non-Exception BaseException (``SystemExit``, say)."""
    return PluginError(f"{where} raised {type(exc).__name__}: {exc}; a plugin may not end the process, "
                       "so this is a fault of that plugin")


def raised_in(hook: str, exc: BaseException) -> str:
    """``"raised RuntimeError in its dispatch_kernel hook: boom"``; a contained exit is named as itself."""
    cause = exc.__cause__
    if isinstance(exc, PluginError) and cause is not None and not isinstance(cause, Exception):
        exc = cause
    return f"raised {type(exc).__name__} in its {hook} hook: {exc}"


def forced_fault(backend: Backend, spec: CallSpec, exc: BaseException) -> BaseException:
    """What a forced backend's hook fault becomes: a :class:`BackendFaultError` naming backend, hook and
    call (``exc`` itself when it is no hook fault of ``backend``)."""
    fault = backend.fault_of(exc)
    if fault is None:
        return exc
    return BackendFaultError(f"backend {backend.name!r} {raised_in(fault.hook, exc)} on {spec.describe()}; "
                             "it was forced, so no other backend serves this call",
                             backend=backend.name, hook=fault.hook, op=spec.op)
