"""Each TileLang config of log_softmax/softmax 4x262144 bf16, called directly (no dispatcher), under concurrent graph replays."""
import sys, torch
from dispatch.tolerance import mismatch
from dispatch_tilelang.build import build
from dispatch_tilelang.configs import cuda_config_space
TRIALS = int(sys.argv[1]) if len(sys.argv) > 1 else 15
shape = (4, 262144)
def X(seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, device="cuda", generator=g) * 4).to(torch.bfloat16)
big = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
for op in ["log_softmax", "softmax"]:
    theirs = lambda x: getattr(torch, op)(x, -1)
    for cfg in cuda_config_space(op, 4, 262144, "bfloat16"):
        ck = build(op, 4, 262144, torch.bfloat16, torch.bfloat16, cfg, "cuda")
        ex = X(3); want = theirs(ex)
        bad = []; total = 0
        for trial in range(TRIALS):
            xs = [X(1), X(2)]; graphs = []
            for x in xs:
                fn = lambda x=x: ck(x)
                side = torch.cuda.Stream(); side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(3): fn()
                torch.cuda.current_stream().wait_stream(side)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g): o = fn()
                graphs.append((g, o))
            streams = [torch.cuda.Stream() for _ in range(4)]; eo = []
            for _ in range(5):
                with torch.cuda.stream(streams[3]):
                    for _ in range(2): big @ big
                for st, (g, _) in zip(streams, graphs):
                    st.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(st): g.replay()
                with torch.cuda.stream(streams[2]):
                    eo.append(ck(ex))
            torch.cuda.synchronize()
            for x, (_, o) in zip(xs, graphs):
                total += 1
                m = mismatch(o, theirs(x))
                if m is not None: bad.append(("graph", trial, m[:70]))
            for o in eo:
                total += 1
                m = mismatch(o, want)
                if m is not None: bad.append(("eager", trial, m[:70]))
            del graphs
        print(op, cfg, f"bad {len(bad)} of {total}", bad[:4], flush=True)
