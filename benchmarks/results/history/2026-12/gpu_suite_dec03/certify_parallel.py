"""The conformance kit's default grid for one backend, dealt over K processes (the kit tries every
config of the tune space, which on a GPU compiles many kernels: one process took over 290 s).

    python3 certify_parallel.py BACKEND [K]

Prints each failed case and a summary line; exits 1 if any case failed.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time


def part(args):
    backend, i, k = args
    from dispatch_pytest.cases import default_cases
    from dispatch_pytest.conformance import _backend, _ops_of, certify

    cases = default_cases(_ops_of(_backend(backend)))[i::k]
    report = certify(backend, cases)
    return len(report.passed), len(report.results) - len(report.passed) - len(report.failed), \
        [str(c) for c in report.failed]


def main() -> int:
    backend, k = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 8
    start = time.time()
    with mp.get_context("spawn").Pool(k) as pool:
        parts = pool.map(part, [(backend, i, k) for i in range(k)])
    passed = sum(p for p, _, _ in parts)
    other = sum(o for _, o, _ in parts)
    failed = [f for _, _, fs in parts for f in fs]
    for f in failed:
        print("FAILED", f)
    print(f"certify({backend!r}) in {k} processes, {time.time() - start:.0f} s: {passed} passed, "
          f"{len(failed)} failed, {other} refused or skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
