"""Backend plugins: discovery through entry points, registration, rollback and load failures."""

from __future__ import annotations

import os
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import Any

import pluggy
from attrs import frozen

from . import _opdecl, hookspec
from ._backend import Backend, Fault, contained
from ._settings import env_flag
from ._spec import BackendInfo
from .errors import PluginError, PluginLoadWarning

ENTRY_POINT_GROUP = "dispatch.backends"
ENV_DISABLE_AUTOLOAD = "DISPATCH_DISABLE_PLUGIN_AUTOLOAD"
ENV_PLUGINS = "DISPATCH_PLUGINS"
#: Loaded even with autoload off: the reference is the oracle every other backend is checked against.
ALWAYS_LOADED = ("torch",)


@frozen
class LoadFailure:
    """A plugin that could not be loaded: its entry-point name, where it came from, and why."""

    name: str
    origin: str
    error: str
    traceback: str = ""


def _declared_ops(hooks: Mapping[str, Callable[..., Any]], plugin_name: str, origin: str) -> tuple:
    """The op declarations a plugin's ``dispatch_ops`` hook returns, checked."""
    hook = hooks.get("dispatch_ops")
    if hook is None:
        return ()
    try:
        decls = hook()
    except (KeyboardInterrupt, Exception):
        raise
    except BaseException as exc:  # SystemExit: a plugin may not end the process
        raise contained(exc, f"plugin {plugin_name!r}: dispatch_ops") from exc
    if isinstance(decls, _opdecl.OpDecl):
        decls = (decls,)
    try:
        decls = tuple(decls)
    except TypeError:
        decls = (decls,)
    bad = [d for d in decls if not isinstance(d, _opdecl.OpDecl)]
    if bad:
        raise PluginError(f"plugin {plugin_name!r} from {origin}: dispatch_ops must return "
                          f"dispatch.backend.OpDecl objects (got {bad[0]!r})")
    return decls


def _hook_functions(pm: pluggy.PluginManager, plugin_name: str) -> dict[str, Callable[..., Any]]:
    """The plugin's hook implementations, each called with only the arguments it declares (as pluggy does)."""
    hooks = {}
    for hook_name in dir(pm.hook):
        if not hook_name.startswith("dispatch_"):
            continue
        for impl in getattr(pm.hook, hook_name).get_hookimpls():
            if impl.plugin_name == plugin_name:
                hooks[hook_name] = _taking_declared(impl.function, impl.argnames)
    return hooks


def _taking_declared(function: Callable[..., Any], argnames: tuple[str, ...]) -> Callable[..., Any]:
    def call(**kwargs: Any) -> Any:
        return function(**{name: kwargs[name] for name in argnames})
    call.__wrapped__ = function
    return call


class Registry:
    """The loaded backends and the plugins that failed to load. Read it through views."""

    def __init__(self) -> None:
        self._pm = pluggy.PluginManager(hookspec.PROJECT)
        self._pm.add_hookspecs(hookspec)
        self._backends: dict[str, Backend] = {}
        self._failures: list[LoadFailure] = []
        self._op_plugins: dict[str, tuple[object, tuple[str, ...]]] = {}
        self._loaded = False  # True once the entry points have loaded
        self._lock = threading.RLock()

    @property
    def backends(self) -> Mapping[str, Backend]:
        return MappingProxyType(self._backends)

    @property
    def failures(self) -> tuple[LoadFailure, ...]:
        return tuple(self._failures)

    def register(self, plugin: object, name: str | None = None, origin: str = "register()") -> Backend | None:
        """Register ``plugin`` (a backend, an op package, or both); all or nothing: on any error it
        is rolled back and the error raised. Returns the backend, or None for an op package."""
        with self._lock:
            plugin_name = name or getattr(plugin, "__name__", None) or repr(plugin)
            if plugin_name in self._backends or plugin_name in self._op_plugins:
                what = (f"a backend named {plugin_name!r} ({self._backends[plugin_name].plugin!r})"
                        if plugin_name in self._backends else f"an op package named {plugin_name!r}")
                raise PluginError(f"{what} is already registered; unregister it first, or register this "
                                  "one under another name (name=...)")
            try:
                self._pm.register(plugin, name=plugin_name)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # pluggy reads the plugin's attributes: its code may run
                raise PluginError(f"plugin {plugin_name!r} from {origin}: {exc}") from exc
            try:
                try:
                    self._pm.check_pending()
                except pluggy.PluginValidationError as exc:  # a hookimpl of no known hook: a misspelt name
                    known = ", ".join(sorted(n for n in dir(self._pm.hook) if n.startswith("dispatch_")
                                             and getattr(self._pm.hook, n).has_spec()))  # not the misspelt one
                    raise PluginError(f"plugin {plugin_name!r} from {origin}: {exc}; the hooks are {known} "
                                      "(docs/writing-a-backend.md)") from exc
                hooks = _hook_functions(self._pm, plugin_name)
                decls = _declared_ops(hooks, plugin_name, origin)
                backend_hooks = [h for h in hooks if h != "dispatch_ops"]
                if not backend_hooks and not decls and "dispatch_ops" in hooks:
                    raise PluginError(f"plugin {plugin_name!r} from {origin}: its dispatch_ops returned no op; an op "
                                      "package returns its dispatch.backend.OpDecl objects (docs/writing-an-op.md)")
                if not backend_hooks and not decls:
                    raise PluginError(f"plugin {plugin_name!r} from {origin} implements no dispatch hook: a backend "
                                      f"implements {', '.join(hookspec.REQUIRED_HOOKS)}, an op package "
                                      "dispatch_ops; see docs/writing-a-backend.md and docs/writing-an-op.md")
                info = None
                if backend_hooks:
                    info = self._backend_info(hooks, plugin_name, name, origin)
                    if self._loaded:  # while entry points load, ops may be declared later: checked after
                        _check_ops(info, {d.name for d in decls})
                names = [d.name for d in decls]
                twice = next((n for n in names if names.count(n) > 1), None)
                if twice is not None:
                    raise PluginError(f"plugin {plugin_name!r} from {origin}: dispatch_ops returns op {twice!r} "
                                      f"{names.count(twice)} times; op names must be unique")
                for decl in decls:
                    if _opdecl.declared().get(decl.name) is not None:  # (the same OpDecl too: whose op would it be?)
                        raise PluginError(f"plugin {plugin_name!r} from {origin} declares op {decl.name!r}, which "
                                          f"is already declared by {_opdecl.origin(decl.name)}; op names must be "
                                          "unique")
                    shadowed = _opdecl.shadowed_by_dispatch(decl.name)
                    if shadowed:
                        raise PluginError(f"plugin {plugin_name!r} from {origin} declares op {decl.name!r}: {shadowed}")
            except BaseException:
                self._pm.unregister(name=plugin_name)
                raise
            for decl in decls:
                _opdecl.declare(decl, origin=f"plugin {plugin_name!r} ({origin})")
            self._op_plugins[plugin_name] = (plugin, tuple(d.name for d in decls))
            if info is None:
                return None
            backend = Backend(info, plugin, hooks)
            self._backends[info.name] = backend
            return backend

    def _backend_info(self, hooks, plugin_name: str, name: str | None, origin: str) -> BackendInfo:
        missing = [h for h in hookspec.REQUIRED_HOOKS if h not in hooks]
        if missing:
            raise PluginError(f"plugin {plugin_name!r} from {origin} does not implement the required "
                              f"hook(s) {', '.join(missing)}; see docs/writing-a-backend.md")
        info = _backend_info(hooks["dispatch_backend_info"], plugin_name)
        if not isinstance(info, BackendInfo):
            raise PluginError(f"plugin {plugin_name!r}: dispatch_backend_info returned {info!r}, "
                              "not a dispatch.BackendInfo")
        if name is not None and info.name != name:
            raise PluginError(f"plugin registered as {name!r} calls itself {info.name!r}; the entry-point "
                              "name and BackendInfo.name must agree")
        if info.reference and info.name not in ALWAYS_LOADED:
            raise PluginError(f"plugin {plugin_name!r} from {origin}: its card says reference=True, which marks "
                              "torch's own ops, the oracle every other backend is checked against; a backend's "
                              "kernels are checked against it, so leave reference at False")
        if info.name in self._backends:
            raise PluginError(f"plugin {plugin_name!r} from {origin} calls itself {info.name!r}, which is "
                              "already registered")
        return info

    def unregister(self, name: str) -> None:
        """Remove the backend or op package registered as ``name`` (and the ops it declared)."""
        with self._lock:
            backend = self._backends.pop(name, None)
            package = self._op_plugins.pop(name, None)
            if backend is None and package is None:
                raise KeyError(f"no backend or op package named {name!r} is registered (registered: "
                               f"{', '.join(sorted({*self._backends, *self._op_plugins}))})")
            plugin = backend.plugin if backend is not None else package[0]
            if backend is not None and package is None:
                for plugin_name, (other, _ops) in list(self._op_plugins.items()):
                    if other is plugin:
                        package = self._op_plugins.pop(plugin_name)
            for op in (package[1] if package else ()):
                _opdecl.undeclare(op)
            self._pm.unregister(plugin=plugin)

    def load_entry_points(self, environ: Mapping[str, str] = os.environ) -> None:
        """Load every ``dispatch.backends`` entry point that may load; record the ones that fail, and
        warn of each (:class:`~dispatch.errors.PluginLoadWarning`)."""
        failed_before = len(self._failures)
        autoload = not env_flag(environ.get(ENV_DISABLE_AUTOLOAD), ENV_DISABLE_AUTOLOAD)
        named = {n for n in environ.get(ENV_PLUGINS, "").replace(" ", "").split(",") if n}
        taken: dict[str, tuple[str, str]] = {}  # name -> (origin, value) of the entry point that has it
        # this package's own entry points first under each name: no other package's "torch" takes
        # the reference's place
        for ep in sorted(_entry_points(), key=lambda ep: (ep.name, not _built_in(ep))):
            origin = f"entry point {ep.name!r} = {ep.value!r}" + (f" of {ep.dist.name} {ep.dist.version}"
                                                                 if getattr(ep, "dist", None) else "")
            if ep.name in taken:
                first, value = taken[ep.name]
                if value != ep.value:  # (the same entry point seen twice on the path is not a clash)
                    self._failures.append(LoadFailure(ep.name, origin, f"PluginError: not loaded: the name "
                                                      f"{ep.name!r} is taken by {first}; a backend's entry "
                                                      "point needs a name of its own"))
                continue
            taken[ep.name] = (origin, ep.value)
            if ep.name in self._backends:
                continue
            if not autoload and ep.name not in named and ep.name not in ALWAYS_LOADED:
                continue
            modules_before = set(sys.modules)
            try:
                plugin = ep.load()
                self.register(plugin, name=ep.name, origin=origin)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # SystemExit at import included: a plugin cannot end the process
                top = ep.value.split(":")[0].split(".")[0]
                for mod in set(sys.modules) - modules_before:  # roll back a half-imported plugin
                    if mod == top or mod.startswith(top + "."):
                        sys.modules.pop(mod, None)
                self._failures.append(LoadFailure(ep.name, origin, f"{type(exc).__name__}: {exc}",
                                                  "".join(traceback.format_exception(
                                                      type(exc), exc, exc.__traceback__, chain=False))))
        for name in sorted(named - set(taken)):  # a name in DISPATCH_PLUGINS that nothing installed has
            self._failures.append(LoadFailure(name, f"{ENV_PLUGINS}={environ.get(ENV_PLUGINS, '')!r}",
                                              f"PluginError: no installed entry point is named {name!r} (installed: "
                                              f"{', '.join(sorted(taken)) or 'none'})"))
        for backend in list(self._backends.values()):  # every op a backend names must now be declared
            try:
                _check_ops(backend.info, set())
            except ValueError as exc:
                self.unregister(backend.name)
                self._failures.append(LoadFailure(backend.name, f"backend {backend.name!r}", f"ValueError: {exc}"))
        self._loaded = True
        for failure in self._failures[failed_before:]:
            warnings.warn(f"backend plugin {failure.name!r} ({failure.origin}) failed to load and is skipped: "
                          f"{failure.error} (`python -m dispatch backends -v` shows the traceback)",
                          PluginLoadWarning, stacklevel=2)


def _check_ops(info: BackendInfo, declaring: set[str]) -> None:
    """A backend may only name declared ops (or ops its own plugin declares)."""
    unknown = sorted(op for op in info.ops if op not in _opdecl.declared() and op not in declaring)
    if unknown:
        raise ValueError(f"'ops' must be in the declared ops ({', '.join(_opdecl.declared())}) "
                         f"(got {', '.join(map(repr, unknown))}); is the package that declares it installed?")


def _backend_info(hook: Callable[[], Any], plugin_name: str) -> Any:
    try:
        return hook()
    except (KeyboardInterrupt, Exception):
        raise
    except BaseException as exc:
        raise contained(exc, f"plugin {plugin_name!r}: dispatch_backend_info") from exc


def _entry_points() -> Iterable[Any]:
    return sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)


_DISTRIBUTION = "dispatch-ops"  # this package's distribution, whose entry points are the built-in backends


def _built_in(ep: Any) -> bool:
    dist = getattr(ep, "dist", None)
    name = getattr(dist, "name", None) or ""
    return name.lower().replace("_", "-") == _DISTRIBUTION


_registry: Registry | None = None
_registry_lock = threading.Lock()
_loading_thread: int | None = None
#: How long a thread waits for another one's loading of the plugins before it raises: a plugin
#: that, while it is imported, waits on dispatch work done in another thread would wait forever.
LOAD_WAIT_S = 120.0
_listeners: list[Callable[[], None]] = []


def registry() -> Registry:
    """The process's registry, loading entry points on first use.

    A plugin that asks for the registry (or a refresh) while it is being loaded (from its import
    or its ``dispatch_backend_info``) gets a :class:`PluginError`, reported as its load failure: the
    loading thread never waits on the lock it holds. Another thread waits for the loading at most
    ``LOAD_WAIT_S`` seconds, then gets a PluginError: the loading may be waiting on it.
    """
    global _registry, _loading_thread
    if _registry is None:
        _lock_registry()
        try:
            if _registry is None:
                _loading_thread = threading.get_ident()
                try:
                    reg = Registry()
                    reg.load_entry_points()
                finally:
                    _loading_thread = None
                _registry = reg
        finally:
            _registry_lock.release()
    return _registry


def _lock_registry() -> None:
    """Take the registry's lock, where the loading thread is not this one (a plugin's import asking
    for the registry or a refresh: a PluginError), waiting at most ``LOAD_WAIT_S`` seconds."""
    if _loading_thread == threading.get_ident():
        raise PluginError("a plugin asked for the loaded backends or ops, or a refresh, while plugins are loading "
                          "(from its import or dispatch_backend_info); ask in a later hook instead")
    if not _registry_lock.acquire(timeout=LOAD_WAIT_S):
        raise PluginError(f"plugins have been loading in another thread for over {LOAD_WAIT_S:g} s; a plugin "
                          "that, while it is imported, waits on dispatch work done in another thread never "
                          "finishes loading (`python -m dispatch backends` shows which plugins load)")


def on_change(listener: Callable[[], None]) -> None:
    _listeners.append(listener)


def _changed() -> None:
    for listener in _listeners:
        listener()


def refresh() -> Registry:
    """Forget every loaded backend and load entry points again (after a pip install, say)."""
    global _registry
    _lock_registry()
    try:
        old, _registry = _registry, None
    finally:
        _registry_lock.release()
    if old is not None:
        for _plugin, ops in old._op_plugins.values():
            for op in ops:
                _opdecl.undeclare(op)
    _changed()
    return registry()


def register(plugin: object, name: str | None = None) -> BackendInfo | None:
    """Register a plugin object (a module or an instance with hookimpls) in this process: a
    backend (returns its card), an op package (returns None), or both."""
    backend = registry().register(plugin, name=name)
    _changed()
    return backend.info if backend is not None else None


def unregister(name: str) -> None:
    """Remove the backend ``name`` registered in this process."""
    registry().unregister(name)
    _changed()


def backends() -> Mapping[str, BackendInfo]:
    """A read-only view of the loaded backends' cards, by name."""
    return MappingProxyType({name: b.info for name, b in registry().backends.items()})


def load_failures() -> tuple[LoadFailure, ...]:
    """Plugins that failed to load, with the error and traceback."""
    return registry().failures


def loaded_backends() -> Mapping[str, Backend]:
    """A read-only view of the loaded backends, name -> :class:`Backend` (its card and its hooks,
    called as dispatch calls them: ``check`` never raises, faults are recorded)."""
    return registry().backends


def faults() -> tuple[Fault, ...]:
    """Every hook that raised in this process, per backend."""
    return tuple(f for b in registry().backends.values() for f in b.faults)
