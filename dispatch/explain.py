"""``explain``: which backend and config a call would get, and why."""

from __future__ import annotations

from attrs import frozen

from . import _autocast, _opdecl, _plugins, _settings
from ._autograd import own_backward
from ._dispatcher import DISPATCHER, check_backend_arg
from ._select import Decision
from .distributed import current_group


@frozen
class Explanation:
    """A decision, readable: ``str()`` renders it as a small report."""

    decision: Decision
    hot: bool  # already resolved in this process (the call would be a lookup and a call)
    backward: str | None = None  # for a call autograd records: which backward its gradients take
    compiled_backward: str | None = None  # and the one a torch.compile'd step's backward node runs
    timing: str = "wall"  # what the call is raced by where it is made (settings, or its use() block)
    autocast: str | None = None  # the call as made, where torch.autocast recast it (the decision is the recast call's)
    tuned: bool = False  # made by a tune (`python -m dispatch tune`, `tune.tune_call`), which races with autotune on

    def __str__(self) -> str:
        d = self.decision
        lines = [] if self.autocast is None else [f"{self.autocast}", "  under torch.autocast, served as:"]
        lines += [f"{d.spec.describe()}",
                 f"  bucket: {d.bucket}    policy: {d.policy}    "
                 f"autotune: {'on for this tune' if self.tuned else _settings.settings().autotune}    "
                 f"timing: {self.timing}",
                 "  candidates:"]
        for c in d.candidates:
            mark = "->" if c.name == d.backend else ("ok" if c.verdict.ok else "no")
            timing = f"  {c.latency_us:.2f} us" if c.latency_us is not None else ""
            if c.tune_s is not None:
                split = ""
                if c.compile_s is not None and c.timing_s is not None:
                    split = f": compile {c.compile_s:.1f} s, timing {c.timing_s:.1f} s"
                timing += f"  (tuned in {c.tune_s:.1f} s{split})"
            note = f"  ({c.note})" if c.note else ""
            lines.append(f"    {mark} {c.name:<12} {c.verdict.reason}{timing}{note}")
        lines.append(f"  choice: {d.backend}  config: {d.config}  ({d.config_source})")
        lines.append(f"  why: {d.reason}")
        if self.backward is not None:
            lines.append(f"  backward: {self.backward}")
        if self.compiled_backward is not None:
            lines.append(f"  backward in a torch.compile'd step: {self.compiled_backward}")
        raced = self.tuned and any(c.latency_us is not None for c in d.candidates)
        cached = "yes" if d.cached else "no (raced now; stored in the cache)" if raced else "no"
        lines.append(f"  cached decision: {cached}    resolved in this process: "
                     f"{'yes' if self.hot else 'no'}")
        if d.agreed:
            lines.append(f"  agreed by: {d.agreed}")
        if d.tune is not None and d.tune.timings:
            lines.append(f"  tuned configs (compile {d.tune.compile_s:.1f} s, timing {d.tune.timing_s:.1f} s):")
            full = max(t.reps for t in d.tune.timings)
            for t in sorted(d.tune.timings, key=lambda t: t.median_us):
                stopped = f"  (stopped early after {t.reps} reps)" if 0 < t.reps < full else ""
                lines.append(f"    {t.median_us:10.2f} us  +-{t.spread_us:.2f}  {t.config}{stopped}")
            for f in d.tune.failures:
                lines.append(f"    failed: {f.config}: {f.reason}")
        if d.pruned:
            lines.append("  pruned configs (not tried for this shape):")
            lines += [f"    {config}: {why}" for config, why in d.pruned]
        return "\n".join(lines)


def explain(op: str, *args, backend: str | None = None, **kwargs) -> Explanation:
    """Say which backend and config ``dispatch.<op>(*args, **kwargs)`` would run, and why.

    Takes the op's own arguments (``explain("softmax", x, -1)``, ``explain("logsumexp", x, 1,
    keepdim=True)``). Shows every backend's verdict with its reason, timings when the decision
    was raced, the shape bucket, and whether the decision came from the cache. Runs no kernel
    unless tuning is on and the key is new (then it tunes, as the call would).
    """
    check_backend_arg(backend)
    fn = DISPATCHER.function(op)
    if fn.decl.out:  # the op's out= does not change what serves the call
        kwargs.pop("out", None)
    values = fn.decl.bind(*args, **kwargs)
    spec = fn.decl.spec(values)
    recast = _autocast.recast(fn.decl, values) if fn.decl.autocast else None
    made = None
    key = fn.call_key(values, backend)
    if recast is not None:  # the call torch's autocast makes of it is what runs
        made = spec.describe()
        kept = _autocast.in_kernel(fn.decl, values, recast)
        spec, copied = DISPATCHER.in_kernel_spec(fn.decl, kept, backend) if kept is not None else (None, True)
        if copied:  # the float32 call, on copies
            spec, key = fn.decl.spec(recast), fn.call_key(recast, backend)
        else:  # its half-precision input read in the kernel
            key = DISPATCHER.in_kernel_key(fn.decl, values, backend)
    resolved = DISPATCHER.decisions.get(op, {}).get(key) if key is not None else None
    timing = _settings.effective().timing
    compiled = _compiled_backward(spec, backend)
    if resolved is not None:
        return Explanation(resolved, hot=True, backward=_backward(resolved), compiled_backward=compiled,
                           timing=timing, autocast=made)
    _plugins.registry()
    decision = DISPATCHER.decide(spec, backend)
    return Explanation(decision, hot=False, backward=_backward(decision), compiled_backward=compiled,
                       timing=timing, autocast=made)


def _compiled_backward(spec, backend: str | None) -> str | None:
    """Which backward a torch.compile'd training step's backward node runs for a call of ``spec``
    (a training call chosen by device time: :meth:`Dispatcher.backward_kernel`), in words; None
    for a call autograd does not record."""
    if not spec.requires_grad:
        return None
    try:  # (under torch.distributed, what the group agreed; explain on one rank must not start an agreement)
        decision = DISPATCHER.compiled_backward_decision(spec, backend, joins=False)
    except Exception as exc:  # noqa: BLE001 - said as the node would meet it
        return f"none: {type(exc).__name__}: {exc}"
    said = _backward(decision)
    if not (decision.agreed or decision.forced) and current_group(_settings.effective().distributed) is not None:
        said += " (this rank's own choice: its group agrees on it at a compiled step's first backward)"
    if _opdecl.get(spec.op).saved is not None and not _plugins.registry().backends[decision.backend].info.reference:
        try:
            _decision, backward = DISPATCHER.backward_kernel(spec, backend)  # (the node's own, kept)
        except Exception:  # noqa: BLE001 - (said by _backward)
            backward = None
        if hasattr(backward, "saves"):  # (Dispatcher.saving_plan: the forward node runs its forward)
            said += f", after {decision.backend}'s forward, which fills the buffers it reads"
    return said


def _backward(decision: Decision) -> str | None:
    """Which backward a call of ``decision`` takes, said in words, when autograd records it."""
    spec = decision.spec
    if not spec.requires_grad:
        return None
    chosen = _plugins.registry().backends[decision.backend]
    if chosen.info.reference:
        return f"{decision.backend}'s (autograd through torch's own ops)"
    try:
        own = own_backward(chosen, spec)
    except Exception as exc:  # noqa: BLE001 - a faulty hook is reported here, as the call would find it
        return f"unknown: {decision.backend}'s dispatch_backward raised {type(exc).__name__}: {exc}"
    if own is not None:
        return f"{decision.backend}'s own backward kernel"
    how = ("the op's declared backward" if _opdecl.get(spec.op).backward is not None
           else "autograd runs through torch's ops")
    return f"the op's reference backward ({decision.backend} ships no backward kernel for this call; {how})"
