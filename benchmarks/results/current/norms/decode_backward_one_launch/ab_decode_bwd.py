"""Decode-shape norm backward: dweight/dbias sums in the rows' launch (ONE_LAUNCH) or in a second
launch, against torch eager (and torch.compile with --compile): device time from CUDA-graph
replays (median of 5 x 200 replays), and per-call wall time of back-to-back calls of our backward."""
import statistics, sys, time
import torch, torch.nn.functional as F
from dispatch_triton import norm_backward as NB

dev = torch.device("cuda")
import torch._functorch.config  # noqa: E402
torch._functorch.config.donated_buffer = False  # its backward replayed with retain_graph
COMPILE = "--compile" in sys.argv


def graph_us(make, reps=200):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # autograd's forward and warm-up on the capturing stream
        fn = make()
        for _ in range(3):
            fn()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    out = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            g.replay()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b) * 1e3 / reps)
    return statistics.median(out)


def wall_us(fn, calls=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / calls * 1e6


for op in ("rms_norm", "layer_norm"):
    for dt in (torch.bfloat16, torch.float32):
        for m in (1, 8, 32):
            n = 4096
            x = torch.randn(m, n, device=dev, dtype=dt)
            dy = torch.randn(m, n, device=dev, dtype=dt)
            w = torch.randn(n, device=dev, dtype=dt)
            b = torch.randn(n, device=dev, dtype=dt) if op == "layer_norm" else None
            rest = (b,) if b is not None else ()
            row = []
            outs = {}
            for one in (False, True):
                bk = NB.make_backward(op, m, n, dt, n, 1e-5, True, b is not None, plan=dict(ONE_LAUNCH=one))
                fn = lambda: bk(dy, x, w, *rest, None)
                outs[one] = fn()
                row.append(f"{'one' if one else 'two'} {graph_us(lambda: fn):.2f} / {wall_us(fn):.1f}")
            same = all(torch.equal(a, c) for a, c in zip(outs[False], outs[True]) if a is not None)
            leaves = [t.detach().clone().requires_grad_() for t in (x, w) + rest]

            def fwd(*ts):
                return F.rms_norm(ts[0], (n,), ts[1], 1e-5) if op == "rms_norm" else \
                    F.layer_norm(ts[0], (n,), ts[1], ts[2], 1e-5)

            def grad_of(f):  # the backward alone: autograd.grad of one forward's output, replayed
                def make():
                    y = f(*leaves)
                    return lambda: torch.autograd.grad(y, leaves, dy, retain_graph=True)
                return make
            row.append(f"torch eager {graph_us(grad_of(fwd)):.2f}")
            if COMPILE and m >= 8 and dt == torch.bfloat16:
                row.append(f"torch.compile {graph_us(grad_of(torch.compile(fwd, fullgraph=True))):.2f}")
            print(f"{op} {str(dt)[6:]} {m}x{n}: device us / wall us a call: " + "; ".join(row)
                  + f"; same bits both ways: {same}", flush=True)
