"""``explain``: which backend and config a call would get, and why."""

from __future__ import annotations

from attrs import frozen

from . import _plugins, _settings
from ._dispatcher import DISPATCHER
from ._select import Decision
from ._spec import OPS
from .ops import call_key, make_spec


@frozen
class Explanation:
    """A decision, readable: ``str()`` renders it as a small report."""

    decision: Decision
    hot: bool  # already resolved in this process (the call would be a lookup and a call)

    def __str__(self) -> str:
        d = self.decision
        lines = [f"{d.spec.describe()}",
                 f"  bucket: {d.bucket}    policy: {d.policy}    autotune: {_settings.settings().autotune}",
                 "  candidates:"]
        for c in d.candidates:
            mark = "->" if c.name == d.backend else ("ok" if c.verdict.ok else "no")
            timing = f"  {c.latency_us:.2f} us" if c.latency_us is not None else ""
            if c.tune_s is not None:
                timing += f"  (tuned in {c.tune_s:.1f} s)"
            note = f"  ({c.note})" if c.note else ""
            lines.append(f"    {mark} {c.name:<12} {c.verdict.reason}{timing}{note}")
        lines.append(f"  choice: {d.backend}  config: {d.config}  ({d.config_source})")
        lines.append(f"  why: {d.reason}")
        lines.append(f"  cached decision: {'yes' if d.cached else 'no'}    resolved in this process: "
                     f"{'yes' if self.hot else 'no'}")
        if d.agreed:
            lines.append(f"  agreed by: {d.agreed}")
        if d.tune is not None and d.tune.timings:
            lines.append("  tuned configs:")
            for t in sorted(d.tune.timings, key=lambda t: t.median_us):
                lines.append(f"    {t.median_us:10.2f} us  +-{t.spread_us:.2f}  {t.config}")
            for f in d.tune.failures:
                lines.append(f"    failed: {f.config}: {f.reason}")
        return "\n".join(lines)


def explain(op: str, input, dim=-1, dtype=None, keepdim: bool = False, *, backend: str | None = None) -> Explanation:
    """Say which backend and config ``dispatch.<op>(input, dim, ...)`` would run, and why.

    Shows every backend's verdict with its reason, timings when the decision was raced, the
    shape bucket, and whether the decision came from the cache. Runs no kernel unless tuning is
    on and the key is new (then it tunes, as the call would).
    """
    if op not in OPS:
        raise ValueError(f"'op' must be one of {', '.join(OPS)} (got {op!r})")
    spec = make_spec(op, input, dim, dtype, keepdim)
    resolved = DISPATCHER.decisions[op].get(call_key(op, input, dim, dtype, keepdim, backend, spec))
    if resolved is not None:
        return Explanation(resolved, hot=True)
    _plugins.registry()
    return Explanation(DISPATCHER.decide(spec, backend), hot=False)
