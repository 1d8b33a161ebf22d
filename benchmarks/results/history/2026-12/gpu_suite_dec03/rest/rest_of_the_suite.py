"""The test ids a first run did not reach: the suite's ids collected now, less those the first
run's logs gave a result for (``ran_first.txt.gz``: one id a line), less the conformance tests
(run apart, in several processes). Prints the ids, one a line.

    python3 rest_of_the_suite.py benchmarks/results/history/2026-12/gpu_suite_dec03/rest/ran_first.txt.gz > rest.txt
"""

import gzip
import subprocess
import sys

seen = set(gzip.open(sys.argv[1], "rt").read().splitlines())
out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests/"],
                     capture_output=True, text=True).stdout
ids = [ln for ln in out.splitlines() if "::" in ln and not ln.startswith(" ")]
rest = [i for i in ids if i not in seen and "test_certified_against_the_reference" not in i]
print(len(ids), "collected;", len(rest), "not run on Dec 3 (the conformance tests aside)", file=sys.stderr)
print("\n".join(rest))
