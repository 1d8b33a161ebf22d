"""A/B testing of backends: parity with an fp64 reference, latency, GB/s against the copy ceiling.

    from dispatch.ab import compare
    run = compare("softmax", shapes=["4096x4096"], dtypes=["bfloat16"], backends="torch,triton")
    print(run.to_markdown()); run.to_json("ab.json"); run.plot("ab.png")
"""

import json
from pathlib import Path

from ._result import STATUSES, BackendResult, Comparison, CopyBandwidth, bytes_moved, gbps
from ._run import compare, make_call, measure_copy_bandwidth


def load(path: str | Path) -> Comparison:
    """Read a run written by :meth:`Comparison.to_json` (``--json FILE``) back."""
    return Comparison.from_dict(json.loads(Path(path).read_text()))


__all__ = ["STATUSES", "BackendResult", "Comparison", "CopyBandwidth", "bytes_moved", "compare",
           "gbps", "load", "make_call", "measure_copy_bandwidth"]
