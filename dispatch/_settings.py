"""Who may serve a call: process-wide settings, env vars, and per-block scopes (``use``)."""

from __future__ import annotations

import contextvars
import functools
import numbers
import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Callable

import attrs
from attrs import field, frozen
from attrs.validators import optional

POLICIES = ("measured", "static")
#: What a race times and the cost estimate counts: a call's wall time in eager code (its host launch
#: included), or its device time alone, for code that runs under CUDA graphs.
TIMINGS = ("wall", "device")
ENV_TIMING = "DISPATCH_TIMING"

ENV_BACKEND = "DISPATCH_BACKEND"
ENV_ALLOW = "DISPATCH_ALLOW"
ENV_DENY = "DISPATCH_DENY"
ENV_POLICY = "DISPATCH_POLICY"
ENV_AUTOTUNE = "DISPATCH_AUTOTUNE"
ENV_STRICT = "DISPATCH_STRICT"
ENV_DISTRIBUTED = "DISPATCH_DISTRIBUTED"
ENV_DISTRIBUTED_TIMEOUT = "DISPATCH_DISTRIBUTED_TIMEOUT"
ENV_SHARED_CACHE = "DISPATCH_SHARED_CACHE"


def _names(value: Iterable[str] | str | None, what: str) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [v for v in re.split(r"[,\s]+", value) if v]  # 'torch,triton', 'torch, triton', 'torch triton'
    try:
        if isinstance(value, (bytes, bytearray, Mapping)):  # (a mapping's keys would pass for names)
            raise TypeError
        names = frozenset(value)
    except TypeError:
        raise TypeError(f"'{what}' must be a str like 'torch,triton' or a list of str (got {value!r})") from None
    for name in names:
        if not isinstance(name, str) or not name:
            raise TypeError(f"'{what}' must hold backend names, non-empty str (got {name!r} in {value!r})")
    return names


def _allow_list(value: Iterable[str] | str | None) -> frozenset[str] | None:
    names = _names(value, "allow")
    if names is not None and not names:
        raise ValueError(f"'allow' names no backend (got {value!r}), so no call could be served; "
                         "None (or leaving it unset) allows every backend")
    return names


def _backend_name(instance, attribute, value) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise TypeError(f"'{attribute.name}' must be a backend name (a non-empty str) or None to choose "
                        f"(got {value!r})")


def _one_of(options: tuple[str, ...]):
    def check(instance, attribute, value) -> None:
        if value not in options:
            raise ValueError(f"'{attribute.name}' must be one of {', '.join(map(repr, options))} (got {value!r})")
    return check


def _bool(instance, attribute, value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"'{attribute.name}' must be True or False (got {value!r})")


def _positive_seconds(value) -> float:
    try:
        seconds = float(value) if isinstance(value, numbers.Real) else -1.0  # (float('10') would take a str)
    except (TypeError, ValueError, OverflowError):
        seconds = -1.0
    if isinstance(value, bool) or not seconds > 0:
        raise ValueError(f"'distributed_timeout' must be a number of seconds > 0 (got {value!r})")
    return seconds


@frozen(cache_hash=True)
class Scope:
    """Backend constraints of one ``with dispatch.use(...)`` block (nested blocks are merged), and the
    timing its calls are raced by (None: the process-wide one)."""

    backend: str | None = field(default=None, validator=_backend_name)
    allow: frozenset[str] | None = field(default=None, converter=_allow_list)
    deny: frozenset[str] = field(default=frozenset(), converter=lambda v: _names(v, "deny") or frozenset())
    timing: str | None = field(default=None, validator=optional(_one_of(TIMINGS)))

    def inside(self, outer: Scope | None) -> Scope:
        """This scope nested in ``outer``: the inner backend and timing win, allow lists intersect,
        deny lists add."""
        if outer is None:
            return self
        allow = self.allow if outer.allow is None else (outer.allow if self.allow is None else outer.allow & self.allow)
        if allow is not None and not allow:
            raise ValueError(f"use(allow={sorted(self.allow)}) inside use(allow={sorted(outer.allow)}) allows no "
                             "backend (nested allow lists intersect), so no call could be served; allow one the "
                             "outer block allows, or leave allow out")
        return Scope(backend=self.backend or outer.backend, allow=allow, deny=outer.deny | self.deny,
                     timing=self.timing or outer.timing)


def env_flag(text: str | None, name: str) -> bool | None:
    """An environment flag's value: None when unset or empty; a value not 0/1/true/false/yes/no/on/off
    raises, naming the variable."""
    if text is None or text == "":
        return None
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name} must be 0/1/true/false/yes/no/on/off (got {text!r})")


def _group_or_flag(instance, attribute, value) -> None:
    if isinstance(value, bool) or (hasattr(value, "size") and hasattr(value, "rank")):
        return
    import torch.distributed as dist

    if dist.is_available() and value is dist.GroupMember.NON_GROUP_MEMBER:  # new_group() outside the group
        return
    raise TypeError(f"'distributed' must be True, False or a torch.distributed ProcessGroup (got {value!r})")


def _seconds(text: str | None, name: str) -> float | None:
    if text is None or text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{name} must be a number of seconds > 0 (got {text!r})")
    return value


@frozen
class Settings:
    """Process-wide settings. ``backend`` forces one backend; ``allow``/``deny`` filter the rest."""

    backend: str | None = field(default=None, validator=_backend_name)
    allow: frozenset[str] | None = field(default=None, converter=_allow_list)
    deny: frozenset[str] = field(default=frozenset(), converter=lambda v: _names(v, "deny") or frozenset())
    policy: str = field(default="measured", validator=_one_of(POLICIES))
    autotune: bool = field(default=False, validator=_bool)
    strict: bool = field(default=False, validator=_bool)
    distributed: object = field(default=True, validator=_group_or_flag)
    distributed_timeout: float = field(default=300.0, converter=_positive_seconds)
    shared_cache: bool = field(default=False, validator=_bool)
    timing: str = field(default="wall", validator=_one_of(TIMINGS))

    @classmethod
    def from_env(cls, environ: os._Environ | dict = os.environ) -> Settings:
        """Settings from ``DISPATCH_BACKEND``, ``_ALLOW``, ``_DENY``, ``_POLICY``, ``_AUTOTUNE``, ``_STRICT``,
        ``_DISTRIBUTED``, ``_DISTRIBUTED_TIMEOUT``, ``_SHARED_CACHE`` and ``_TIMING``."""
        timing = environ.get(ENV_TIMING) or "wall"
        if timing not in TIMINGS:
            raise ValueError(f"{ENV_TIMING} must be one of {', '.join(TIMINGS)} (got {timing!r})")
        policy = environ.get(ENV_POLICY) or "measured"
        if policy not in POLICIES:
            raise ValueError(f"{ENV_POLICY} must be one of {', '.join(POLICIES)} (got {policy!r})")
        allow = environ.get(ENV_ALLOW) or None
        if allow is not None and not _names(allow, ENV_ALLOW):
            raise ValueError(f"{ENV_ALLOW}={allow!r} names no backend, so no call could be served; unset it to "
                             "allow every backend")
        return cls(
            backend=environ.get(ENV_BACKEND) or None,
            allow=allow,
            deny=environ.get(ENV_DENY) or None,
            policy=policy,
            autotune=bool(env_flag(environ.get(ENV_AUTOTUNE), ENV_AUTOTUNE)),
            strict=bool(env_flag(environ.get(ENV_STRICT), ENV_STRICT)),
            distributed=env_flag(environ.get(ENV_DISTRIBUTED), ENV_DISTRIBUTED) is not False,
            distributed_timeout=_seconds(environ.get(ENV_DISTRIBUTED_TIMEOUT), ENV_DISTRIBUTED_TIMEOUT) or 300.0,
            shared_cache=bool(env_flag(environ.get(ENV_SHARED_CACHE), ENV_SHARED_CACHE)),
            timing=timing,
        )


_lock = threading.Lock()
_settings: Settings | None = None
_listeners: list[Callable[[], None]] = []
_scope: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("dispatch_scope", default=None)
current_scope = _scope.get  # the hot path reads the innermost scope with one call


def settings() -> Settings:
    """The process-wide settings (read from the environment on first use)."""
    global _settings
    if _settings is None:
        with _lock:
            if _settings is None:
                _settings = Settings.from_env()
    return _settings


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener`` whenever the settings change (the dispatcher drops resolved calls)."""
    _listeners.append(listener)


_UNSET = object()


def configure(*, backend=_UNSET, allow=_UNSET, deny=_UNSET, policy=_UNSET, autotune=_UNSET,
              strict=_UNSET, distributed=_UNSET, distributed_timeout=_UNSET, shared_cache=_UNSET,
              timing=_UNSET) -> Settings:
    """Change process-wide settings; arguments left out keep their value. Returns the new settings.

    ``backend``: a backend name forced for every call (None: choose), ``allow``/``deny``:
    backend names (None allows all), ``policy``: ``"measured"`` or ``"static"``, ``autotune``:
    tune on a cache miss, ``strict``: any fallback after a backend fault raises instead.
    ``distributed``: under torch.distributed, agree each decision with the default group (True),
    with this process group, or not at all (False); ``distributed_timeout``: seconds a rank waits
    for the others before every rank falls back to the static order; ``shared_cache``: the cache
    directory is shared by the group's ranks, so only its rank 0 writes agreed decisions.
    ``timing``: ``"wall"`` (default) races and estimates what an eager call costs, host launch
    included; ``"device"`` counts device time alone, for code that runs under CUDA graphs (where a
    GPU kernel with a costly launch but a short run is the faster choice). Decisions are cached
    per timing.
    """
    global _settings
    changes = {k: v for k, v in dict(backend=backend, allow=allow, deny=deny, policy=policy,
                                      autotune=autotune, strict=strict, distributed=distributed,
                                      distributed_timeout=distributed_timeout,
                                      shared_cache=shared_cache, timing=timing).items() if v is not _UNSET}
    with _lock:
        _settings = attrs.evolve(settings(), **changes) if _settings is not None else attrs.evolve(
            Settings.from_env(), **changes)
    for listener in _listeners:
        listener()
    return _settings


def reset() -> Settings:
    """Forget ``configure`` calls: settings are read from the environment again."""
    global _settings
    with _lock:
        _settings = None
    for listener in _listeners:
        listener()
    return settings()


def effective(scope: Scope | None = _UNSET) -> Settings:
    """The settings in force for a call made in ``scope`` (default: the current one): the
    process-wide ones, with the scope's timing where it sets one."""
    if scope is _UNSET:
        scope = _scope.get()
    current = settings()
    if scope is None or scope.timing is None or scope.timing == current.timing:
        return current
    return attrs.evolve(current, timing=scope.timing)


@functools.lru_cache(maxsize=256)
def _nested(backend, allow, deny, timing, outer: Scope | None) -> Scope:
    """The scope of a block with these (hashable) arguments inside ``outer``: one object per
    combination, so entering a block costs a lookup, and call keys holding it compare by identity."""
    return Scope(backend=backend, allow=allow, deny=deny, timing=timing).inside(outer)


_entered: contextvars.ContextVar[tuple] = contextvars.ContextVar("dispatch_entered", default=())


class use:  # noqa: N801 (used as a function: ``with dispatch.use(...)``)
    """Within the block, force ``backend`` (if given), filter backends by ``allow``/``deny``, and race
    calls by ``timing`` (``"wall"`` or ``"device"``, as :func:`configure`'s; None: the process-wide
    one): ``use(timing="device")`` around code that a CUDA graph captures and replays.

    Scopes nest (the innermost backend and timing win) and follow contextvars, so threads and
    asyncio tasks each see their own; one ``use`` object may be entered again, within itself, and
    by several threads or tasks at once. ``with`` gives the block's :class:`Scope`; a bad argument
    raises there (TypeError or ValueError naming it). As a decorator (``@dispatch.use("torch")``)
    it puts each call of the function in such a block.
    """

    __slots__ = ("_args",)

    def __init__(self, backend: str | None = None, *, allow: Iterable[str] | str | None = None,
                 deny: Iterable[str] | str | None = None, timing: str | None = None) -> None:
        self._args = (backend, allow, deny, timing)

    def __enter__(self) -> Scope:
        outer = _scope.get()
        try:
            scope = _nested(*self._args, outer)
        except TypeError:  # an unhashable argument (a list of names), or a bad one: made and checked here
            scope = _nested.__wrapped__(*self._args, outer)
        # the token that restores the outer scope, kept in this thread's or task's context
        _entered.set((*_entered.get(), (self, _scope.set(scope))))
        return scope

    def __call__(self, func: Callable) -> Callable:
        """``func`` with each of its calls in this block."""
        @functools.wraps(func)
        def in_block(*args, **kwargs):
            with self:
                return func(*args, **kwargs)
        return in_block

    def __exit__(self, *exc) -> None:
        entered = _entered.get()
        for i in range(len(entered) - 1, -1, -1):
            if entered[i][0] is self:
                _entered.set(entered[:i] + entered[i + 1:])
                _scope.reset(entered[i][1])
                return
        raise RuntimeError("a dispatch.use() block was left in a thread or task that did not enter it")
