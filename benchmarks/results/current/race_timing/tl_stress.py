"""TileLang's 4x262144 bf16 kernels under concurrent CUDA-graph replays: the rare NaN hunted.

The pattern of ``tests/test_gpu_launch.py::test_concurrent_replays_and_eager_calls_do_not_corrupt_each_other``
(two graphs replayed on two streams beside eager calls on a third, five rounds), ``TRIALS`` times:

    python3 tl_stress.py OUT_DIR [TRIALS]            # through dispatch (the tuned config), with and
                                                     # without a matmul on a fourth stream; the
                                                     # log_softmax kernel's CUDA source to OUT_DIR
    python3 tl_stress.py OUT_DIR [TRIALS] --configs  # every config of the space, called directly
"""
import os
import sys

import torch

import dispatch
from dispatch.tolerance import mismatch

SHAPE = (4, 262144)


def X(seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(SHAPE, device="cuda", generator=g) * 4).to(torch.bfloat16)


def trials(ours, theirs, n, load):
    """Wrong outputs of ``n`` trials of the pattern: (graph or eager, trial, what was wrong)."""
    big = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    ex = X(3)
    want = theirs(ex)
    bad = []
    for trial in range(n):
        xs = [X(1), X(2)]
        graphs = []
        for x in xs:
            fn = lambda x=x: ours(x)  # noqa: E731
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    fn()
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                o = fn()
            graphs.append((g, o))
        streams = [torch.cuda.Stream() for _ in range(4)]
        eager = []
        for _ in range(5):
            if load:
                with torch.cuda.stream(streams[3]):
                    for _ in range(2):
                        big @ big
            for st, (g, _) in zip(streams, graphs):
                st.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(st):
                    g.replay()
            with torch.cuda.stream(streams[2]):
                eager.append(ours(ex))
        torch.cuda.synchronize()
        for x, (_, o) in zip(xs, graphs):
            m = mismatch(o, theirs(x))
            if m is not None:
                bad.append(("graph", trial, m[:70]))
        for o in eager:
            m = mismatch(o, want)
            if m is not None:
                bad.append(("eager", trial, m[:70]))
    return bad, n * 7


def main():
    out, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 30
    if "--configs" in sys.argv:
        from dispatch_tilelang.build import build
        from dispatch_tilelang.configs import cuda_config_space
        for op in ["log_softmax", "softmax"]:
            for cfg in cuda_config_space(op, *SHAPE, "bfloat16"):
                kernel = build(op, *SHAPE, torch.bfloat16, torch.bfloat16, cfg, "cuda")
                bad, total = trials(kernel, lambda x, op=op: getattr(torch, op)(x, -1), n, load=True)
                print(op, cfg, f"bad {len(bad)} of {total}", bad[:4], flush=True)
        return
    for op in ["log_softmax", "softmax", "logsumexp"]:
        ours = lambda x, op=op: getattr(dispatch, op)(x, -1, backend="tilelang")  # noqa: E731
        ours(X(3))
        print(op, "config", dispatch.explain(op, X(3), -1, backend="tilelang").decision.config, flush=True)
        for load in (False, True):
            bad, total = trials(ours, lambda x, op=op: getattr(torch, op)(x, -1), n, load)
            print(op, "load" if load else "no load", f"bad {len(bad)} of {total}", bad[:6], flush=True)
    from dispatch_tilelang.build import build
    cfg = dispatch.explain("log_softmax", X(1), -1, backend="tilelang").decision.config
    src = build("log_softmax", *SHAPE, torch.bfloat16, torch.bfloat16, cfg.as_dict(), "cuda").kernel.get_kernel_source()
    with open(os.path.join(out, "tl_log_softmax_4x262144.cu"), "w") as f:
        f.write(src)


if __name__ == "__main__":
    main()
