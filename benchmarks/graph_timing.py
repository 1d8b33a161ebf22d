"""Device time per call under CUDA-graph replay, shared by the benchmarks (``bench_launch``,
``bench_compile``): a call captured several times in one graph, the graph replayed and timed with
CUDA events, so that the host's launch cost is out of the measurement."""

from __future__ import annotations

import statistics

import torch

GRAPH_CALLS = 20  # calls captured in one graph


def graph_replay_us(fn, repeats: int = 15, calls: int = GRAPH_CALLS) -> tuple[float, float, list]:
    """``(median, spread, outputs)``: device time per call of ``fn()`` (us), captured ``calls``
    times in one CUDA graph and replayed ``repeats`` times (median, and the spread between the
    second-fastest and second-slowest repeat), and what the captured calls returned (the graph's
    own outputs, which every replay rewrites with the same values)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as torch's docs ask
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [fn() for _ in range(calls)]
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(repeats):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / calls)
    del graph
    samples.sort()
    return statistics.median(samples), samples[-2] - samples[1] if len(samples) > 3 else 0.0, outs
