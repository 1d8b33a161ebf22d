"""Initial-kwarg seeding for JIT autotuners that bind the kernel signature before trying candidates.

TileLang 0.1.11+ binds an autotuned program's signature before any candidate config is applied,
so a program whose tunable parameters have no defaults must be *seeded* with values for them,
and those seeds must then be excluded from the autotuner's specialization key
(``do_not_specialize``) -- otherwise the seeds read as "already tuned" and the sweep is skipped.

This module is the DSL-independent half of that protocol: which JIT parameters to seed, with
what values, and how a full config (which may carry build-time keys such as ``tile_n`` that pick
a kernel family and are *not* JIT parameters) is cut down to what the JIT program accepts.

Vocabulary:

* *JIT parameters*: the names in the JIT program's signature (``block_m``, ``threads_arg``...).
* *config keys*: the names used in config dicts, config spaces and caches (``block_m``, ``threads``).
* *aliases*: ``{jit_param_name: config_key}`` for the parameters whose names differ,
  e.g. ``{"threads_arg": "threads"}``. A JIT parameter absent from the map uses its own name.
* *tunables*: the config keys (or, equivalently, JIT parameter names) the autotuner varies.
* *build-time keys*: config keys that are not JIT parameters; they select which JIT program to
  build (e.g. ``tile_n``) and must never reach the DSL's autotuner.

Nothing here imports a DSL; it works on names, ``inspect.Signature`` objects and dicts.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import PluginError

__all__ = [
    "SeedingError",
    "jit_parameters",
    "required_jit_parameters",
    "seed_kwargs",
    "split_build_keys",
    "strip_build_keys",
    "to_config_keys",
]

JitParams = inspect.Signature | Callable[..., Any] | Iterable[str]


class SeedingError(PluginError, ValueError):
    """A default config cannot seed a JIT program: a backend author's mistake, reported with names."""


def _as_mapping(config: Any) -> Mapping[str, Any]:
    """Accept plain mappings and config objects that offer ``as_dict()`` (``dispatch.autotune.Config``)."""
    if isinstance(config, Mapping):
        return config
    as_dict = getattr(config, "as_dict", None)
    if callable(as_dict):
        return as_dict()
    raise TypeError(f"'config' must be a mapping of names to values (got {config!r})")


def _signature(jit_params: JitParams) -> inspect.Signature | None:
    if isinstance(jit_params, inspect.Signature):
        return jit_params
    sig = getattr(jit_params, "signature", None)  # TileLang's JITImpl keeps the wrapped signature
    if isinstance(sig, inspect.Signature):
        return sig
    if callable(jit_params):
        return inspect.signature(jit_params)
    return None


def _bindable(jit_params: JitParams, required: bool) -> tuple[str, ...]:
    sig = _signature(jit_params)
    if sig is None:
        return tuple(jit_params)  # type: ignore[arg-type]
    return tuple(
        name
        for name, p in sig.parameters.items()
        if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        and not (required and p.default is not inspect.Parameter.empty)
    )


def jit_parameters(jit_params: JitParams) -> tuple[str, ...]:
    """The parameter names of a JIT program, in signature order.

    ``jit_params`` may be an ``inspect.Signature``, a callable (a TileLang ``JITImpl`` exposes
    ``.signature``; any other callable is inspected), or an iterable of names.
    ``*args`` / ``**kwargs`` entries are not bindable by name and are left out.
    """
    return _bindable(jit_params, required=False)


def required_jit_parameters(jit_params: JitParams) -> tuple[str, ...]:
    """The JIT parameters without a default. With only names to go on, all of them count as required."""
    return _bindable(jit_params, required=True)


def _config_key(jit_name: str, aliases: Mapping[str, str] | None) -> str:
    return (aliases or {}).get(jit_name, jit_name)


def seed_kwargs(
    jit_params: JitParams,
    default_config: Mapping[str, Any],
    tunables: Iterable[str],
    aliases: Mapping[str, str] | None = None,
    *,
    required_only: bool = True,
    fallback_config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Initial kwargs that let an autotuned JIT program bind: one value per tunable JIT parameter.

    For every JIT parameter that is tunable (by its own name or by the config key it aliases to)
    and, with ``required_only`` (the default), has no default in the signature, the value is
    taken from ``default_config[config_key]`` -- or from ``fallback_config`` when the default
    config lacks that key (e.g. the default belongs to another kernel family). Parameters that
    are not tunable (shapes, dtypes) are the caller's to pass and are never seeded.

    The keys of the result are JIT parameter names; pass exactly those names as the DSL's
    specialization exclusion (TileLang: ``autotune(..., do_not_specialize=list(seeds))``), or
    the seeds will be taken for a finished tuning and the sweep skipped.

    Raises:
        SeedingError: a required tunable JIT parameter has no value in either config.

    >>> seed_kwargs(["block_m", "threads_arg"], {"block_m": 4, "threads": 128, "tile_n": 0},
    ...             tunables=["block_m", "threads"], aliases={"threads_arg": "threads"})
    {'block_m': 4, 'threads_arg': 128}
    """
    tunable = set(tunables)
    default_config = _as_mapping(default_config)
    fallback_config = None if fallback_config is None else _as_mapping(fallback_config)
    names = required_jit_parameters(jit_params) if required_only else jit_parameters(jit_params)
    seeds: dict[str, Any] = {}
    missing = []
    for name in names:
        key = _config_key(name, aliases)
        if name not in tunable and key not in tunable:
            continue
        if key in default_config:
            seeds[name] = default_config[key]
        elif fallback_config is not None and key in fallback_config:
            seeds[name] = fallback_config[key]
        else:
            missing.append(name if key == name else f"{name} (config key {key!r})")
    if missing:
        raise SeedingError(
            f"cannot seed tunable JIT parameter(s) {', '.join(missing)}: the default config "
            f"{dict(default_config)!r} has no value for them. Add them to the kernel's default "
            "config, or give the JIT parameters defaults."
        )
    return seeds


def split_build_keys(
    config: Mapping[str, Any],
    jit_params: JitParams,
    aliases: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a config into (JIT kwargs keyed by JIT parameter name, build-time keys keyed by config key).

    A config key reaches the JIT side when it is a JIT parameter's name or the config key a JIT
    parameter aliases to; everything else is a build-time key.

    >>> split_build_keys({"block_m": 2, "threads": 256, "tile_n": 4096},
    ...                  ["block_m", "threads_arg"], {"threads_arg": "threads"})
    ({'block_m': 2, 'threads_arg': 256}, {'tile_n': 4096})
    """
    config = _as_mapping(config)
    names = jit_parameters(jit_params)
    by_key = {_config_key(name, aliases): name for name in names}
    jit_kwargs: dict[str, Any] = {}
    build: dict[str, Any] = {}
    for key, value in config.items():
        if key in by_key:
            jit_kwargs[by_key[key]] = value
        elif key in names:
            jit_kwargs[key] = value
        else:
            build[key] = value
    return jit_kwargs, build


def strip_build_keys(
    config: Mapping[str, Any],
    jit_params: JitParams,
    aliases: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The part of ``config`` a JIT program accepts, renamed to JIT parameter names (build-time keys dropped).

    >>> strip_build_keys({"block_m": 2, "threads": 256, "tile_n": 4096}, ["block_m", "threads"])
    {'block_m': 2, 'threads': 256}
    """
    return split_build_keys(config, jit_params, aliases)[0]


def to_config_keys(jit_kwargs: Mapping[str, Any], aliases: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Rename JIT parameter names back to config keys (the inverse of what ``strip_build_keys`` did).

    >>> to_config_keys({"block_m": 2, "threads_arg": 256}, {"threads_arg": "threads"})
    {'block_m': 2, 'threads': 256}
    """
    return {_config_key(name, aliases): value for name, value in jit_kwargs.items()}
