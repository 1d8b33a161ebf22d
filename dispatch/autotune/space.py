"""The autotune protocol's data: configs, a kernel's tune space, timings and results."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from attrs import field, frozen
from attrs.validators import deep_iterable, ge

from .._card_checks import kind_of


def _as_items(value: Any) -> tuple[tuple[str, Any], ...]:
    if isinstance(value, Config):
        return value.items
    if isinstance(value, Mapping):
        for k, v in value.items():
            plain = v is None or isinstance(v, (str, bool, int)) or (isinstance(v, float) and math.isfinite(v))
            if not plain:  # (what the decision cache stores as JSON, hashes and compares)
                raise TypeError(f"'config' values must be plain: str, int, a finite float, bool or None (got "
                                f"{k}={v!r} in {dict(value)!r})")
        return tuple(sorted((str(k), v) for k, v in value.items()))
    raise TypeError(f"'config' must be a mapping of names to values (got {value!r})")


def _same(a: Any, b: Any) -> bool:
    """Equal and of one type: ``4.0``, ``True`` and ``4`` are equal in Python, but a kernel built
    with ``block_m=4.0`` or ``True`` is not the one built with ``4``."""
    return type(a) is type(b) and a == b


@frozen(eq=False)
class Config:
    """One point of a tune space: parameter names to plain values. Hashable, ordered by name; two
    configs are equal where each value is equal and of the same type (``4`` is not ``4.0``)."""

    items: tuple[tuple[str, Any], ...] = field(converter=_as_items)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Config):
            return NotImplemented
        return len(self.items) == len(other.items) and all(
            k == j and _same(v, w) for (k, v), (j, w) in zip(self.items, other.items))

    def __hash__(self) -> int:
        return hash(tuple((k, type(v).__name__, v) for k, v in self.items))

    @classmethod
    def of(cls, values: Mapping[str, Any] | Config | None = None, **kwargs: Any) -> Config:
        merged = dict(_as_items(values)) if values is not None else {}
        merged.update(kwargs)
        return cls(merged)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.items)

    def __getitem__(self, key: str) -> Any:
        return self.as_dict()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.as_dict().get(key, default)

    def __bool__(self) -> bool:
        return bool(self.items)

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True)

    def __str__(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.items) or "(default)"


EMPTY = Config({})


def _configs(value: Any) -> tuple[Config, ...]:
    return tuple(Config.of(c) for c in value)


def _mapping(value: Mapping) -> Mapping[str, str]:
    return MappingProxyType(dict(value))


def unique_configs(configs) -> list[dict]:
    """``configs`` (dicts) without repeats, in their first order (a config space built from
    overlapping rules lists some candidates twice)."""
    seen: dict[tuple, dict] = {}
    for cfg in configs:
        seen.setdefault(tuple(sorted(cfg.items())), cfg)
    return list(seen.values())


@frozen
class TuneSpace:
    """What a backend kernel declares to be tuned.

    ``configs`` are the candidates for one call spec, already pruned (``pruned`` keeps what was
    dropped and why, for ``explain``); ``default`` serves when nothing is tuned; ``tunables`` are
    the kernel's tunable JIT parameter names; ``aliases`` map a JIT parameter name to its config
    key (``{"threads_arg": "threads"}``); ``build_keys`` are config keys that pick a kernel at
    build time and are never JIT parameters (``tile_n``).
    """

    configs: tuple[Config, ...] = field(converter=_configs)
    default: Config = field(converter=Config.of)
    tunables: tuple[str, ...] = field(default=(), converter=tuple, validator=deep_iterable(kind_of(str)))
    aliases: Mapping[str, str] = field(factory=dict, converter=_mapping)
    build_keys: tuple[str, ...] = field(default=(), converter=tuple)
    pruned: tuple[tuple[Config, str], ...] = field(default=(), converter=tuple)

    def __attrs_post_init__(self) -> None:
        if not self.configs:
            raise ValueError("'configs' must hold at least one config (got none): put the default in it")
        if self.default not in self.configs:
            raise ValueError(f"'default' must be one of 'configs' (got {self.default}; "
                             f"configs are {[str(c) for c in self.configs]})")


@frozen
class Timing:
    """One candidate's measurement: median and spread (inter-quartile range) in microseconds."""

    config: Config
    median_us: float = field(validator=ge(0.0))
    spread_us: float = field(default=0.0, validator=ge(0.0))
    reps: int = 0


@frozen
class Failure:
    """A candidate that could not win, and why (compile error, crash, wrong result)."""

    config: Config
    reason: str


@frozen
class TuneResult:
    """The outcome of a sweep. A result always has a config and a latency: never None."""

    config: Config = field(validator=kind_of(Config))
    latency_us: float = field(converter=float, validator=ge(0.0))
    spread_us: float = field(default=0.0, converter=float)
    timings: tuple[Timing, ...] = field(default=(), converter=tuple)
    failures: tuple[Failure, ...] = field(default=(), converter=tuple)
    source: str = "sweep"
    compile_s: float = field(default=0.0, converter=float)  # seconds spent compiling candidates ahead of timing
    timing_s: float = field(default=0.0, converter=float)  # seconds spent timing them (and whatever was left to build)

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config.as_dict(),
            "latency_us": self.latency_us,
            "spread_us": self.spread_us,
            "timings": [{"config": t.config.as_dict(), "median_us": t.median_us, "spread_us": t.spread_us,
                         "reps": t.reps} for t in self.timings],
            "failures": [{"config": f.config.as_dict(), "reason": f.reason} for f in self.failures],
            "source": self.source,
            "compile_s": self.compile_s,
            "timing_s": self.timing_s,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TuneResult:
        return cls(
            config=Config.of(data["config"]),
            latency_us=data["latency_us"],
            spread_us=data.get("spread_us", 0.0),
            timings=tuple(Timing(Config.of(t["config"]), float(t["median_us"]), float(t.get("spread_us", 0.0)),
                                 int(t.get("reps", 0))) for t in data.get("timings", ())),
            failures=tuple(Failure(Config.of(f["config"]), str(f["reason"])) for f in data.get("failures", ())),
            source=str(data.get("source", "sweep")),
            compile_s=float(data.get("compile_s", 0.0)),
            timing_s=float(data.get("timing_s", 0.0)),
        )


@frozen
class TuneSettings:
    """How candidates are measured. Defaults follow the protocol: warm-up 25, repetitions 50."""

    warmup: int = field(default=25, validator=ge(1))
    rep: int = field(default=50, validator=ge(1))
    tie_tolerance: float = field(default=0.02, validator=ge(0.0))
    # A race between backends: one other than the reference wins only if it beats the reference
    # by more than this (relative). Wall times of launch-bound calls move by 10-20% from one
    # machine start to the next, so a smaller lead is not a lead a user can count on.
    reference_margin: float = field(default=0.10, validator=ge(0.0))
    # The same for a race timed on the device: a GPU call timed from a flushed L2 (one that moves
    # a quarter of the L2 or more) or under ``timing="device"``. Those times repeat within 1-2%
    # between machine starts, and the reference's 10% would hold back kernels 3-9% faster
    # (benchmarks/results/current/tune/h100_table/).
    device_reference_margin: float = field(default=0.03, validator=ge(0.0))
    flush_l2: bool = True
    host_bound: bool = True  # CUDA: a call costs at least its back-to-back rate (host launch path included)
    # Early stop: a sweep stops timing a candidate whose median after its first ``probe_rep``
    # repetitions is more than ``early_stop`` times the best full median so far (0: never);
    # ``stop_above_us`` is that bound for one measurement (set by the sweep, None: time in full)
    early_stop: float = field(default=1.5, validator=ge(0.0))
    probe_rep: int = field(default=10, validator=ge(1))
    stop_above_us: float | None = None


def config_fits(config: Config, space: TuneSpace | None) -> bool:
    """Whether a stored ``config`` (a cache entry's, a shipped table's) is one ``space`` allows: all
    of its keys at the values of one config of the space (a native tuner's winner may name only
    the tunables and build keys). Without a space, only the empty config fits."""
    wanted = config.as_dict()
    if space is None:
        return not wanted
    return any(all(k in c.as_dict() and _same(c.as_dict()[k], v) for k, v in wanted.items()) for c in space.configs)
