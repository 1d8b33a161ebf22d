"""Run the test-suite in K parallel pytest processes (no pytest-xdist needed) and summarise.

The GPU machine compiles many kernels (nvcc, Triton) while the tests run; spreading the tests
over processes keeps its cores busy: the big modules are dealt over every shard, the others
kept whole (see ``deal``).

    python3 benchmarks/run_tests_sharded.py --shards 4 --out OUTDIR [pytest args, e.g. tests/]
Writes OUTDIR/pytest_shard<i>.log and OUTDIR/pytest_summary.txt; exits non-zero if any shard failed.
``--resume DIR`` runs only the tests that have no outcome in DIR's shard logs (a run whose shards were
stopped at ``--timeout``): keep DIR's logs with the new ones for the whole suite's outcome.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time


# tests that take minutes on a GPU each (a backend's conformance grid, op by op): dealt one a
# shard, whatever their module
SPREAD = ("test_triton_backend.py::test_certified_against_the_reference[",)


def deal(ids: list[str], k: int) -> list[list[str]]:
    """Test ids into ``k`` shards: the ``SPREAD`` tests one a shard, round-robin; a module with
    more than its share of tests dealt round-robin; every other module whole (module fixtures,
    e.g. a package installed for a module's tests, must not run in two processes at once), to
    the lightest shard."""
    shards: list[list[str]] = [[] for _ in range(k)]
    spread = [t for t in ids if any(s in t for s in SPREAD)]
    apart = set(spread)
    for i, test_id in enumerate(spread):
        shards[i % k].append(test_id)
    by_module: dict[str, list[str]] = {}
    for test_id in ids:
        if test_id not in apart:
            by_module.setdefault(test_id.split("::", 1)[0], []).append(test_id)
    for module, tests in sorted(by_module.items(), key=lambda kv: -len(kv[1])):
        if len(tests) > len(ids) / k:
            for i, test_id in enumerate(tests):
                shards[i % k].append(test_id)
        else:
            min(shards, key=len).extend(tests)
    return shards


# a test id: path::name, then its parameters in brackets, which may hold spaces and brackets
# ("[tilelang-(1, 4096)-torch.float32-softmax]")
OUTCOME = re.compile(r"^(\S+::[^\s\[]+(?:\[.*?\])?) (PASSED|FAILED|SKIPPED|XFAIL|XPASS|ERROR)\b")


def finished(log_text: str) -> set[str]:
    """The test ids that a ``pytest -v`` log gives an outcome."""
    return {m.group(1) for m in map(OUTCOME.match, log_text.splitlines()) if m}


def main() -> int:
    begun = time.time()  # the --timeout counts from here: collecting thousands of tests takes a while
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--out", default=".")
    ap.add_argument("--timeout", type=float, default=540,
                    help="seconds from the start (collection included) before the shards are stopped")
    ap.add_argument("--resume", default="", help="a previous --out folder: run only what its shard logs lack")
    a, rest = ap.parse_known_args()
    paths = rest or ["tests/"]
    os.makedirs(a.out, exist_ok=True)
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *paths],
                               capture_output=True, text=True)
    ids = [ln for ln in collected.stdout.splitlines() if "::" in ln and not ln.startswith(" ")]
    if not ids:
        print(collected.stdout[-3000:], collected.stderr[-3000:])
        return 2
    if a.resume:
        logs = [os.path.join(a.resume, f) for f in os.listdir(a.resume) if re.match(r"pytest_shard\d+\.log$", f)]
        if not logs:
            print(f"--resume {a.resume!r}: no pytest_shard<i>.log there")
            return 2
        done = set().union(*(finished(open(f).read()) for f in logs))
        print(f"--resume: {len(done)} of {len(ids)} tests have an outcome in {a.resume}; running the other "
              f"{len(ids) - len(done & set(ids))}")
        ids = [t for t in ids if t not in done]
    shards = deal(ids, a.shards)
    start = time.time()
    procs = []
    for i, shard in enumerate(shards):
        log = open(os.path.join(a.out, f"pytest_shard{i}.log"), "w")
        procs.append((subprocess.Popen([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-rfE", *shard],
                                       stdout=log, stderr=subprocess.STDOUT), log))
    deadline = begun + a.timeout
    for proc, log in procs:
        try:
            proc.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    totals: dict[str, int] = {}
    lines = []
    for i, (proc, _) in enumerate(procs):
        text = open(os.path.join(a.out, f"pytest_shard{i}.log")).read()
        tail = [ln for ln in text.splitlines() if re.match(r"^=+ .*(passed|failed|error|skipped).* in ", ln)]
        lines.append(f"shard {i}: exit {proc.returncode}: {tail[-1] if tail else 'no summary (stopped?)'}")
        for n, what in re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed|deselected)", tail[-1] if tail else ""):
            totals[what] = totals.get(what, 0) + int(n)
        lines += [ln for ln in text.splitlines() if ln.startswith(("FAILED ", "ERROR "))]
    summary = (f"{len(ids)} tests in {a.shards} shards, {time.time() - start:.0f} s: "
               + ", ".join(f"{v} {k}" for k, v in sorted(totals.items())))
    text = summary + "\n" + "\n".join(lines) + "\n"
    open(os.path.join(a.out, "pytest_summary.txt"), "w").write(text)
    print(text)
    return 0 if all(p.returncode == 0 for p, _ in procs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
