"""Decisions agreed by the ranks of a torch.distributed group, through its store, with a timeout.

Under torch.distributed every rank must run the same backend and config for the same key: ranks
that choose on their own disagree (their timings differ), so results differ between ranks, and
kernels with different workspaces or collectives deadlock. So, once torch.distributed is
initialised (and unless ``configure(distributed=False)`` / ``DISPATCH_DISTRIBUTED=0``), every
decision that is not forced is agreed by the group, and every rank of the group joins the same
exchange for it, whatever it holds locally (a rank with a cached decision never skips it):

1. each rank posts the backends it can serve (name, version, priority, config) and its cached
   decision, if it has one;
2. if some rank has a cached decision for a backend that every rank serves, the lowest such
   rank's decision is the answer; else, if every rank races (``measured`` policy, autotune on),
   every rank tunes the backends that all ranks serve and posts its latencies: the fastest
   backend by its slowest rank's latency (max over ranks) wins, with the config tuned on the
   lowest rank; else the first backend that every rank serves, in the static order, with the
   lowest rank's config (tuned by every rank first when every rank tunes, as a rank alone would);
3. the first rank with an answer writes it once (compare-and-set in the store): every rank uses
   that written answer, so a late rank cannot reach another one.

Nothing can hang: a rank waits for the others at most ``distributed_timeout`` seconds (default
300, ``DISPATCH_DISTRIBUTED_TIMEOUT``), then writes the fallback answer (the first backend, in
the static order, that the ranks which did answer all serve, with its default or cached config)
and warns; every rank, including one that arrives later, uses it. The exchange goes through the
store that ``init_process_group`` created (``set``, ``check``, ``compare_set``), not
through a collective on the device, so it works on every backend and never blocks a NCCL stream.
An answer is final for the group's lifetime: a rank that asks again reads it at once.
"""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from attrs import frozen

from ._keys import spec_key
from ._backend import Backend
from ._select import Candidate, Decision, Selector, races_on_device
from ._settings import Scope, Settings, current_scope
from ._spec import CallSpec
from .autotune.space import EMPTY, Config, Timing
from .autotune.sweep import pick_backend
from .errors import FaultWarning

__all__ = ["AgreementWarning", "Group", "current_group"]

_PREFIX = "dispatch/agree/v1"
_POLL_S = 0.05  # the longest pause between a waiting rank's looks at the store


class AgreementWarning(UserWarning):
    """The ranks could not agree (a rank did not answer, or no backend serves every rank)."""


@frozen
class Group:
    """The ranks that agree on decisions: a name for explain, this rank, the size, the store."""

    name: str
    rank: int
    size: int
    store: Any
    backend: str

    def describe(self) -> str:
        return f"{self.name} ({self.size} ranks, {self.backend})"


def current_group(distributed: object = True) -> Group | None:
    """The group that agrees decisions under the ``distributed`` setting, or None (no agreement).

    ``distributed`` is True (torch.distributed's default group, when initialised), False, or a
    ``ProcessGroup`` (its ranks agree; a process outside it decides alone). A group of one rank
    needs no agreement.
    """
    if distributed is False:
        return None
    dist = torch.distributed
    if not dist.is_available() or not dist.is_initialized():
        return None
    group = None if distributed is True else distributed
    try:
        rank, size = dist.get_rank(group), dist.get_world_size(group)
    except (ValueError, RuntimeError) as exc:  # a group destroyed since configure(distributed=group)
        warnings.warn(f"the group set by configure(distributed=...) can't be used ({exc}); this rank decides "
                      "alone (configure(distributed=True) agrees through the default group)", AgreementWarning,
                      stacklevel=4)
        return None
    if rank < 0 or size <= 1:
        return None
    if group is None:
        name = "world"
    else:
        name = "ranks " + ",".join(str(r) for r in dist.get_process_group_ranks(group))
    store = dist.distributed_c10d._get_default_store()
    return Group(name, rank, size, store, str(dist.get_backend(group)))


def agreed_decision(selector: Selector, spec: CallSpec, servers: Sequence[Backend],
                    candidates: Sequence[Candidate], bucket: str, dkey: Mapping[str, str]) -> Decision | None:
    """The group's decision for ``spec``, or None where no group agrees (the caller decides alone).
    A selector that does not join (``Selector.joins``) reads an answer the group wrote and starts
    no exchange: None where there is none yet."""
    group = current_group(selector.settings.distributed)
    if group is None:
        return None
    agreement = _Agreement(selector, group, spec, list(servers), list(candidates), bucket, dict(dkey))
    if not selector.joins:  # (a look on one rank: the group's answer where written, else none)
        final = agreement._written()
        return None if final is None else agreement._apply(final)
    return agreement.run()


def topic(spec: CallSpec, settings: Settings, scope: Scope | None = None) -> str:
    """What names a decision across ranks: the call's key with the device type (not its name), the
    timing it is raced by, whether autograd records the call, and the allow and deny lists in
    force (the same on every rank of an SPMD program; an empty deny list is none)."""
    key: dict[str, Any] = {k: v for k, v in spec_key(spec).items() if k != "device"}
    key["device_type"] = spec.device.type
    key["timing"] = settings.timing
    key["requires_grad"] = spec.requires_grad  # (a training call is served by fewer backends)
    for name, names in (("allow", settings.allow), ("deny", settings.deny),
                        ("scope_allow", scope.allow if scope else None), ("scope_deny", scope.deny if scope else None)):
        key[name] = sorted(names) if names else None
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


class _Agreement:
    """One decision agreed by one group: post, wait, answer once, apply."""

    def __init__(self, selector: Selector, group: Group, spec: CallSpec, servers: list[Backend],
                 candidates: list[Candidate], bucket: str, dkey: dict[str, str]) -> None:
        self.selector, self.group, self.spec = selector, group, spec
        self.servers, self.candidates, self.bucket, self.dkey = servers, candidates, bucket, dkey
        self.base = f"{_PREFIX}/{group.name}/{topic(spec, selector.settings, current_scope())}"
        self.timeout = selector.settings.distributed_timeout

    # -- the exchange ----------------------------------------------------------------------------

    def run(self) -> Decision | None:
        final = self._written()
        if final is None:
            posted, missing = self._exchange("offer", self._offer())
            if missing:
                final = self._settle(self._fallback(posted, missing))
            else:
                answer = self._answer(posted)
                if answer["kind"] == "race":
                    latencies, missing = self._exchange("race", self._race(answer["common"]))
                    answer = (self._fallback(posted, missing) if missing
                              else self._reduce(answer["common"], posted, latencies))
                final = self._settle(answer)
        return self._apply(final)

    def _written(self) -> dict | None:
        store = self.group.store
        try:
            if store.check([self.base + "/final"]):
                return json.loads(store.get(self.base + "/final"))
        except Exception:  # a store that can't answer: no answer was written
            return None
        return None

    def _exchange(self, phase: str, value: Any) -> tuple[dict[int, Any], list[int]]:
        """Post ``value`` for this rank and wait for every rank's: (posted by rank, missing ranks).

        Stops waiting ``distributed_timeout`` seconds after the post (the time this rank spent on
        its own part, a race's tuning, is not counted), or when the answer was written meanwhile.
        A post that is not what this phase expects (another version of dispatch on that rank)
        counts as missing.
        """
        store, size = self.group.store, self.group.size
        keys = [f"{self.base}/{phase}/{r}" for r in range(size)]
        try:
            store.set(keys[self.group.rank], json.dumps(value, sort_keys=True))
        except Exception as exc:
            warnings.warn(f"could not post to the {self.group.describe()} store: {exc}", AgreementWarning,
                          stacklevel=2)
        deadline = time.monotonic() + self.timeout
        pause = 0.001
        while True:
            try:  # (check, not a wait with a timeout: a TCPStore logs each wait that times out)
                if store.check(keys):
                    break
            except Exception:  # the store is gone (its host rank died): no post can come
                break
            if time.monotonic() >= deadline or self._written() is not None:
                break
            time.sleep(pause)
            pause = min(2 * pause, _POLL_S)
        posted, missing = {}, []
        for r, k in enumerate(keys):
            try:
                if store.check([k]):
                    value = json.loads(store.get(k))
                    if _VALID[phase](value):
                        posted[r] = value
                        continue
            except Exception:
                pass
            missing.append(r)
        return posted, missing

    def _settle(self, answer: dict) -> dict:
        """Write ``answer`` unless one is written already; the written one, which every rank uses."""
        try:
            text = self.group.store.compare_set(self.base + "/final", "", json.dumps(answer, sort_keys=True))
            return json.loads(text)
        except Exception as exc:
            warnings.warn(f"could not write the agreed decision for {self.spec.describe()} to the "
                          f"{self.group.describe()} store ({exc}); this rank uses its own answer",
                          AgreementWarning, stacklevel=3)
            return answer

    # -- what a rank posts -----------------------------------------------------------------------

    def _offer(self) -> dict:
        served = []
        for backend in self.servers:
            try:
                config = self._local_config(backend)
            except Exception:  # a hook that raised: this rank can't serve with it
                continue
            served.append({"name": backend.name, "version": backend.info.version,
                           "priority": backend.info.rank(self.spec.device.type), "config": config.as_dict()})
        cached = self._cached_decision({s["name"] for s in served})
        settings = self.selector.settings
        return {"servers": served, "cached": cached, "tune": bool(settings.autotune),
                "measured": settings.policy == "measured"}

    def _cached_decision(self, names: set[str]) -> dict | None:
        """This rank's cached decision for the key, where it names a backend this rank serves with a
        config of that backend's tune space now (else none: :meth:`Selector.usable` warns, as alone)."""
        cached = self.selector.cache.get(self.dkey)
        if not isinstance(cached, dict):
            return None
        served = [b for b in self.servers if b.name in names]
        return cached if self.selector.usable_decision(self.spec, cached, served) is not None else None

    def _local_config(self, backend: Backend) -> Config:
        """The config this rank has for ``backend`` without tuning: its cached tune, or the default."""
        space = backend.tune_space(self.spec.op, self.spec)
        if space is None:
            return EMPTY
        tuned = self.selector._cached_tune(backend, self.spec, space)
        return tuned.config if tuned is not None else space.default

    def _race(self, common: list[str]) -> dict[str, Any]:
        """This rank's tuned latency and config for each backend in ``common`` (or why it failed);
        for a call that fits in L2, the latencies of the backends timed in turns, as a local race
        decides on them (:meth:`Selector.timed_in_turns`). Tuned afresh: a cached tune result
        may be another rank's (ranks of one host share a cache directory unless told otherwise,
        and one key names the same GPU model on every rank), and the group is paced by this
        rank's own latencies."""
        writer = self._may_write()
        tuner = self.selector if writer else Selector(self.selector.registry, _ReadOnly(self.selector.cache),
                                                      self.selector.settings, self.selector.progress)
        by_name = {b.name: b for b in self.servers}
        out: dict[str, Any] = {}
        results = {}
        with tuner.shared_inputs(self.spec):
            _, compiled = tuner.compile_for_race(self.spec, [by_name[name] for name in common], fresh=True)
            for name in common:
                try:
                    results[name] = tuner.tune(by_name[name], self.spec, fresh=True, compiled=compiled.get(name))
                    out[name] = {"latency_us": results[name].latency_us, "config": results[name].config.as_dict()}
                except Exception as exc:  # this rank's backend faulted: it can't win for the group
                    out[name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
                    warnings.warn(f"backend {name!r} could not be tuned on rank {self.group.rank} for "
                                  f"{self.spec.describe()} ({out[name]['error']}); it is left out of the "
                                  f"{self.group.describe()} race", FaultWarning, stacklevel=5)
            finals = tuner.timed_in_turns(self.spec, [by_name[name] for name in common], results)  # as a local race
        for name, timing in (finals or {}).items():
            out[name]["latency_us"] = timing.median_us
        return out

    # -- the answer (a pure function of what the ranks posted) -----------------------------------

    @staticmethod
    def _common(posted: Mapping[int, dict]) -> list[dict]:
        """Backends every posting rank serves (same name and version), in the lowest rank's order."""
        if not posted:
            return []
        first = posted[min(posted)]["servers"]
        return [s for s in first if all(any(o["name"] == s["name"] and o["version"] == s["version"]
                                            for o in p["servers"]) for p in posted.values())]

    @staticmethod
    def _config_from_lowest(posted: Mapping[int, dict], name: str) -> dict:
        for rank in sorted(posted):
            for s in posted[rank]["servers"]:
                if s["name"] == name:
                    return s["config"]
        return {}

    def _answer(self, posted: Mapping[int, dict]) -> dict:
        common = self._common(posted)
        if not common:
            served = "; ".join(f"rank {r}: {', '.join(s['name'] for s in p['servers']) or 'none'}"
                               for r, p in sorted(posted.items()))
            return {"kind": "none", "why": f"no backend is served by every rank ({served})"}
        names = [s["name"] for s in common]
        for rank in sorted(posted):
            cached = posted[rank]["cached"]
            if cached is not None and cached["backend"] in names:
                return {"kind": "cached", "backend": cached["backend"], "config": cached.get("config") or {},
                        "timings": cached.get("timings") or {}, "reason": cached.get("reason", ""),
                        "why": f"rank {rank}'s cached decision ({cached.get('reason', '')})"}
        if all(p["tune"] for p in posted.values()):  # as alone: race if measured, else tune the first
            race = all(p["measured"] for p in posted.values()) and len(names) > 1
            return {"kind": "race", "common": names if race else names[:1]}
        name = names[0]
        return {"kind": "static", "backend": name, "config": self._config_from_lowest(posted, name),
                "why": f"first in the static order of the backends every rank serves ({', '.join(names)})"}

    def _reduce(self, common: list[str], posted: Mapping[int, dict], latencies: Mapping[int, dict]) -> dict:
        slowest: dict[str, float] = {}
        for name in common:
            values = [latencies[r].get(name, {}).get("latency_us") for r in sorted(latencies)]
            if all(v is not None for v in values):
                slowest[name] = max(values)
        if not slowest:
            failed = "; ".join(f"rank {r} {n}: {v.get('error')}" for r, lat in sorted(latencies.items())
                               for n, v in lat.items() if "error" in v)
            others = [s["name"] for s in self._common(posted) if s["name"] not in common]
            if not others:
                return {"kind": "none", "why": f"no backend could be tuned on every rank ({failed})"}
            return {"kind": "static", "backend": others[0], "config": self._config_from_lowest(posted, others[0]),
                    "why": f"{', '.join(common)} could not be tuned on every rank ({failed}); {others[0]}: the "
                           "first in the static order of the other backends every rank serves"}
        failed = {n: "; ".join(f"rank {r}: {latencies[r][n]['error']}" for r in sorted(latencies)
                               if "error" in latencies[r].get(n, {}))
                  for n in common if n not in slowest}
        timings = [Timing(Config.of(name=n), v) for n, v in slowest.items()]
        reference = next((b.name for b in self.servers if b.info.reference), None)
        winner = pick_backend(timings, reference, on_device=races_on_device(self.spec, self.selector.settings.timing)
                              ).config["name"]
        lowest = min(latencies)
        spread = ", ".join(f"{n} {v:.2f} us" for n, v in slowest.items())
        config = latencies[lowest][winner]["config"]
        if len(common) == 1:
            return {"kind": "tuned", "backend": winner, "config": config,
                    "why": f"first in the static order of the backends every rank serves; config tuned on rank {lowest}"}
        left_out = "".join(f"; {n} left out, not tuned on every rank ({why})" for n, why in failed.items())
        return {"kind": "raced", "backend": winner, "config": config, "timings": slowest,
                "notes": {n: f"not tuned on every rank: {why}" for n, why in failed.items()},
                "why": f"fastest by its slowest rank when every rank raced: {spread}; config tuned on rank {lowest}"
                       + left_out}

    def _fallback(self, posted: Mapping[int, dict], missing: Sequence[int]) -> dict:
        common = self._common(posted)
        who = ", ".join(str(r) for r in missing)
        why = (f"rank(s) {who} did not answer within {self.selector.settings.distributed_timeout:g} s (dead, "
               "slow, or making another call: another shape bucket, dtype or allow/deny list is another "
               "agreement); first in the static order of the backends the other ranks serve")
        if not common:
            return {"kind": "none", "why": why}
        name = common[0]["name"]
        return {"kind": "fallback", "backend": name, "config": self._config_from_lowest(posted, name), "why": why}

    # -- using it --------------------------------------------------------------------------------

    def _may_write(self) -> bool:
        return not self.selector.settings.shared_cache or self.group.rank == 0

    def _apply(self, final: Any) -> Decision | None:
        if not isinstance(final, dict):
            final = {"kind": "none", "why": f"the written answer is unreadable ({final!r:.80})"}
        spec, kind = self.spec, final.get("kind")
        where = f"agreed by {self.group.describe()}"
        by_name = {b.name: b for b in self.servers}
        backend = by_name.get(final.get("backend"))
        if kind in ("none", "fallback") or backend is None:
            what = (f"the group's answer {final.get('backend')!r} is not served on this rank"
                    if kind not in ("none", "fallback") else final.get("why", ""))
            warnings.warn(f"{where}: {spec.describe()}: {what}"
                          + ("" if backend is not None else "; this rank decides alone"),
                          AgreementWarning, stacklevel=4)
            if backend is None:
                return None
        config = Config.of(final.get("config") or {})
        timings = final.get("timings") or {}
        notes = final.get("notes") if isinstance(final.get("notes"), dict) else {}
        candidates = [Candidate(c.name, c.verdict, timings.get(c.name), note=str(notes.get(c.name, "")))
                      for c in self.candidates]
        reason = final.get("why", "")
        if kind in ("cached", "raced") and self._may_write():
            value = {"backend": backend.name, "config": config.as_dict(), "reason": final.get("reason", reason),
                     "timings": timings}
            if self.selector.cache.get(self.dkey) != value:
                self.selector.cache.put(self.dkey, value)
        return Decision(spec, backend.name, config, reason, self.selector.settings.policy, candidates,
                        self.bucket, cached=kind == "cached", config_source=f"agreed ({kind})",
                        agreed=f"{self.group.describe()}, rank {self.group.rank}: {kind}")


def _valid_offer(value: Any) -> bool:
    servers = value.get("servers") if isinstance(value, dict) else None
    cached = value.get("cached") if isinstance(value, dict) else None
    return (isinstance(servers, list)
            and all(isinstance(s, dict) and isinstance(s.get("name"), str) and isinstance(s.get("version"), str)
                    and isinstance(s.get("config"), dict) for s in servers)
            and (cached is None or (isinstance(cached, dict) and isinstance(cached.get("backend"), str)
                                   and isinstance(cached.get("config") or {}, dict)))
            and isinstance(value.get("tune"), bool) and isinstance(value.get("measured"), bool))


def _valid_race(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(v, dict) and ("error" in v or (isinstance(v.get("latency_us"), (int, float))
                                                  and isinstance(v.get("config"), dict)))
        for v in value.values())


_VALID = {"offer": _valid_offer, "race": _valid_race}


class _ReadOnly:
    """A cache a rank reads but does not write (a shared directory has one writer: rank 0)."""

    def __init__(self, cache) -> None:
        self._cache = cache

    def get(self, key):
        return self._cache.get(key)

    def put(self, key, value):
        return None
