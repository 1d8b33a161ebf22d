"""One rank of a torch.distributed job for the agreement tests: runs a scenario, writes what it chose.

``python distributed_worker.py SCENARIO RANK WORLD STORE_FILE OUT_DIR [DEVICE]``; the process
group is gloo (``DEVICE`` cpu) or NCCL (``DEVICE`` cuda), initialised from ``STORE_FILE``. Each
rank writes ``OUT_DIR/<rank>.json``: per key, the backend, config, kind of agreement and seconds
taken, and the warnings it saw. Backends ``alpha`` and ``beta`` are real (chunked softmax) but
sleep for a time that depends on the rank, so ranks that raced alone would disagree; ``gamma``
(scenario ``uneven``) is fast but faults on rank 2.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings

import torch
import torch.distributed as dist

import dispatch
import dispatch.backend
from dispatch._keys import decision_key
from dispatch.autotune.cache import default_cache

import chunked_backend

# ms each backend sleeps per call, by rank: alone, ranks 0-1 prefer beta and ranks 2-3 alpha;
# by the slowest rank, alpha takes 3 ms and beta 1 ms, so the group must pick beta.
DELAY_MS = {"alpha": (3.0, 3.0, 0.0, 0.0), "beta": (0.0, 0.0, 1.0, 1.0)}
# scenario "borrowed": rank 1 is slow on beta, rank 0 on neither: the group must pick alpha
DELAY_MS_BORROWED = {"alpha": (1.0, 1.0), "beta": (0.0, 3.0)}


def sleepy(name: str, rank: int, priority: int, delays: dict = DELAY_MS):
    plugin = chunked_backend.make(name, priority=priority)
    inner = plugin.dispatch_kernel
    delay = delays[name][rank % len(delays[name])] / 1000

    @dispatch.hookimpl
    def dispatch_kernel(op, spec, config):
        kernel = inner(op=op, spec=spec, config=config)

        def run(x):
            if delay:
                time.sleep(delay)
            return kernel(x)
        return run

    plugin.dispatch_kernel = dispatch_kernel
    return plugin


def choose(x: torch.Tensor, record: dict, label: str) -> None:
    start = time.monotonic()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        explanation = dispatch.explain("softmax", x)
        torch.testing.assert_close(dispatch.softmax(x), torch.softmax(x, -1))
    d = explanation.decision
    record[label] = {"backend": d.backend, "config": d.config.as_dict(), "agreed": d.agreed,
                     "cached": d.cached, "seconds": time.monotonic() - start, "report": str(explanation),
                     "warnings": [str(w.message) for w in seen if "agreed" in str(w.message)
                                  or "answer" in str(w.message)],
                     "all_warnings": [f"{w.category.__name__}: {w.message}" for w in seen]}


def main() -> None:
    scenario, rank, world, store_file, out_dir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:6]
    device = sys.argv[6] if len(sys.argv) > 6 else "cpu"
    if device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=f"file://{store_file}",
                            rank=rank, world_size=world)
    delays = DELAY_MS_BORROWED if scenario == "borrowed" else DELAY_MS
    dispatch.register(sleepy("alpha", rank, priority=60, delays=delays))
    beta = sleepy("beta", rank, priority=40, delays=delays)
    if not (scenario == "uneven" and rank == world - 1):  # the last rank has no beta there
        dispatch.register(beta)
    if scenario == "uneven":  # gamma would be fastest, but its kernel raises on rank 2
        dispatch.register(chunked_backend.make("gamma", fault="raise" if rank == 2 else None, priority=80))
    dispatch.configure(allow=("alpha", "beta", "gamma"), policy="measured", autotune=True,
                       distributed_timeout=float(os.environ.get("TIMEOUT_S", "30")))
    x = torch.randn(8, 64, device=device)
    record: dict = {}
    if scenario == "race":
        choose(x, record, "agreed")
        dispatch._dispatcher.DISPATCHER.clear()
        with dispatch.use(deny="beta"):  # a block that denies the agreed backend agrees anew
            choose(x, record, "denied")
        dispatch.configure(distributed=False)  # the same race, each rank alone (another bucket)
        choose(torch.randn(8, 256, device=device), record, "alone")
        dispatch.configure(distributed=True)
        start = time.monotonic()  # a forced backend needs no agreement: rank 0 alone, on a new key
        if rank == 0:
            dispatch.softmax(torch.randn(8, 1024, device=device), backend="alpha")
        record["forced_s"] = time.monotonic() - start
    elif scenario == "warm":
        if rank == 0:  # rank 0 alone holds a decision for this key: alpha, which a race would not pick
            registry = dispatch._plugins.registry()
            servers = {n: registry.backends[n].info.version for n in ("alpha", "beta")}
            spec = dispatch.backend.spec_of("softmax", x, -1)
            default_cache().put(decision_key(spec, servers),
                                {"backend": "alpha", "config": {"chunk": 8}, "reason": "tuned earlier"})
        choose(x, record, "agreed")
        record["beta_calls"] = len(beta.calls)  # 0: nobody raced
        pair = dist.new_group([0, 1])  # every rank calls new_group; ranks 2 and 3 get a non-member
        dispatch.configure(distributed=pair)
        choose(torch.randn(8, 32, device=device), record, "pair")
        if rank in (0, 1):  # the group set by configure(distributed=...) destroyed: its ranks decide alone
            dist.destroy_process_group(pair)
            choose(torch.randn(8, 16, device=device), record, "destroyed")
    elif scenario == "uneven":  # counts cache writes too (the test shares one cache directory)
        from dispatch.autotune.cache import DecisionCache

        writes = []
        put = DecisionCache.put
        DecisionCache.put = lambda self, key, value: (writes.append(key), put(self, key, value))[1]
        choose(x, record, "agreed")
        record["writes"] = len(writes)
    elif scenario == "borrowed":  # one cache directory for both ranks, which rank 0 has tuned alone
        if rank == 0:
            from dispatch import _plugins, _settings
            from dispatch._select import Selector

            alone = Selector(_plugins.registry(), default_cache(), _settings.effective())
            spec = dispatch.backend.spec_of("softmax", x, -1)
            for name in ("alpha", "beta"):
                alone.tune(_plugins.registry().backends[name], spec)
        dist.barrier()
        choose(x, record, "agreed")
    elif scenario == "stale":  # rank 1 holds a decision whose config is not in alpha's tune space
        if rank == 1:
            registry = dispatch._plugins.registry()
            servers = {n: registry.backends[n].info.version for n in ("alpha", "beta")}
            default_cache().put(decision_key(dispatch.backend.spec_of("softmax", x, -1), servers),
                                {"backend": "alpha", "config": {"chunk": 7}, "reason": "edited by hand"})
        choose(x, record, "agreed")
    elif scenario == "explain_grad":  # a training call on every rank, then explain on rank 0 only
        xg = x.clone().requires_grad_()
        dispatch.softmax(xg).sum().backward()
        if rank == 0:
            start = time.monotonic()
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                report = str(dispatch.explain("softmax", xg))
            record["explain"] = {"seconds": time.monotonic() - start, "report": report,
                                 "warnings": [str(w.message) for w in seen]}
    elif scenario == "slow_race":  # each rank's own tuning takes longer than the timeout (a slow
        # compile), the higher ranks' a little longer still: the first must wait for them past it
        from dispatch import _tuner

        tune = _tuner.Tuner.tune

        def slow(self, *args, **kwargs):
            time.sleep(1.2 * float(os.environ.get("TIMEOUT_S", "30")) + 0.5 * rank)
            return tune(self, *args, **kwargs)
        _tuner.Tuner.tune = slow
        choose(x, record, "agreed")
    elif scenario == "dies":
        if rank == world - 1:  # dies in the middle of the agreement: after its offer, before its race
            from dispatch import distributed

            def die(self, common):
                os._exit(3)
            distributed._Agreement._race = die
        choose(x, record, "agreed")
    with open(os.path.join(out_dir, f"{rank}.json"), "w") as f:
        json.dump(record, f)
    if scenario != "dies":  # a dead rank can't join the barrier; the survivors just leave
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
