"""A/B testing of backends: parity with an fp64 reference, latency, GB/s against the copy ceiling.

    from dispatch.ab import compare
    run = compare("softmax", shapes=["4096x4096"], dtypes=["bfloat16"], backends="torch,triton")
    print(run.to_markdown()); run.to_json("ab.json"); run.plot("ab.png")

Long sweeps of many rows (split over GPUs, stopped and resumed, merged): ``take_shard``,
``pending``, ``load_sweep``/``save_sweep``, ``merge_sweeps``, ``interleaved_rounds``,
``sweep_markdown`` and ``plot_sweep``; ``benchmarks/bench_softmax.py`` is built on them.
``torch_compiled``: torch.compile as a contender that is compiled for every shape or raises.
"""

from pathlib import Path

from ._result import STATUSES, BackendResult, Comparison, CopyBandwidth, bytes_moved, gbps
from ._compiled import torch_compiled
from ._run import compare, make_call, measure_copy_bandwidth
from ._sweep import (CASE_FIELDS, describe_error, interleaved_rounds, load_sweep, median_round, merge_sweeps,
                     parse_shard, pending, read_json, row_key, save_sweep, take_shard)
from ._sweep_report import geomean, plot_sweep, sweep_markdown


def load(path: str | Path) -> Comparison:
    """Read a run written by :meth:`Comparison.to_json` (``--json FILE``) back; a file that is not
    one raises ``ValueError`` naming it and why (CSV and markdown files are for reading, not loading)."""
    path = Path(path)
    data = read_json(path, "A/B run", "load reads the JSON file a run writes (to_json, --json FILE)")
    try:
        return Comparison.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"A/B run {str(path)!r} is JSON of something else ({type(exc).__name__}: {exc}); load "
                         "reads the file a run writes with to_json (--json FILE)") from None


__all__ = ["CASE_FIELDS", "STATUSES", "BackendResult", "Comparison", "CopyBandwidth", "bytes_moved", "compare",
           "describe_error", "gbps", "geomean", "interleaved_rounds", "load", "load_sweep", "make_call",
           "measure_copy_bandwidth", "median_round", "merge_sweeps", "parse_shard", "pending",
           "plot_sweep", "row_key", "save_sweep", "sweep_markdown", "take_shard", "torch_compiled"]
