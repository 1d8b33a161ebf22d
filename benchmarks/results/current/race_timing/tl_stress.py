"""TileLang cluster kernels at 4x262144 under concurrent graph replays: hunt the rare NaN output."""
import sys, os, torch, dispatch
from dispatch.tolerance import mismatch
R = sys.argv[1]; TRIALS = int(sys.argv[2]) if len(sys.argv) > 2 else 30
shape = (4, 262144)
def X(seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, device="cuda", generator=g) * 4).to(torch.bfloat16)
def describe(o, want):
    nan = int(torch.isnan(o.float()).sum()); sent = int((o.float() == 7.0).sum())
    return f"nan={nan} sentinel7={sent} of {o.numel()}"
big = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
for op in ["log_softmax", "softmax", "logsumexp"]:
    ours = lambda x: getattr(dispatch, op)(x, -1, backend="tilelang")
    theirs = lambda x: getattr(torch, op)(x, -1)
    ex = X(3); want = theirs(ex); ours(ex)
    cfg = dispatch.explain(op, ex, -1, backend="tilelang").decision.config
    print(op, "config", cfg, flush=True)
    for load in (False, True):
        bad = []; total = 0
        for trial in range(TRIALS):
            xs = [X(1), X(2)]; graphs = []
            for x in xs:
                fn = lambda x=x: ours(x)
                side = torch.cuda.Stream(); side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(3): fn()
                torch.cuda.current_stream().wait_stream(side)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g): o = fn()
                graphs.append((g, o))
            streams = [torch.cuda.Stream() for _ in range(4)]; eo = []
            for _ in range(5):
                if load:
                    with torch.cuda.stream(streams[3]):
                        for _ in range(3): big @ big
                for st, (g, _) in zip(streams, graphs):
                    st.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(st): g.replay()
                with torch.cuda.stream(streams[2]):
                    s = torch.full(want.shape, 7.0, dtype=want.dtype, device="cuda"); del s
                    eo.append(ours(ex))
            torch.cuda.synchronize()
            for x, (_, o) in zip(xs, graphs):
                total += 1
                if mismatch(o, theirs(x)) is not None: bad.append(("graph", trial, describe(o, None)))
            for o in eo:
                total += 1
                if mismatch(o, want) is not None: bad.append(("eager", trial, describe(o, want)))
            del graphs
        print(op, "load" if load else "no load", f"bad {len(bad)} of {total}", bad[:6], flush=True)
try:
    from dispatch_tilelang.build import build
    cfg = dispatch.explain("log_softmax", X(1), -1, backend="tilelang").decision.config
    ck = build("log_softmax", 4, 262144, torch.bfloat16, torch.bfloat16, cfg.as_dict(), "cuda")
    src = ck.kernel.get_kernel_source()
    open(os.path.join(R, "tl_log_softmax_4x262144.cu"), "w").write(src)
    print("source lines", src.count("\n"))
except Exception:
    import traceback; traceback.print_exc()
