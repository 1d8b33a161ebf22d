"""The resolved call's wrapper with and without the per-call view check, same process, interleaved rounds."""
import statistics, sys
import torch, dispatch
sys.path.insert(0, "benchmarks")  # run from the repository root
from profile_call import per_call
from dispatch._dispatcher import DISPATCHER
from dispatch import _native
print(_native.status())
for backend in ("triton", "tilelang"):
    for shape in [(1, 4096), (32, 4096), (4, 50257)]:
        x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        f = DISPATCHER.function("softmax")
        fns = {}
        for flag in (True, False):
            f.key.views_keyed = flag
            DISPATCHER.tables.setdefault("softmax", {}).clear()
            DISPATCHER.decisions.setdefault("softmax", {}).clear()
            for _ in range(3):
                dispatch.softmax(x, -1, backend=backend)
            (key, fn), = DISPATCHER.tables["softmax"].items()
            fns["plain" if flag else "checked"] = fn
        f.key.views_keyed = True
        table = DISPATCHER.tables["softmax"]
        res = {k: {"host": [], "wall": []} for k in fns}
        def call():
            return dispatch.softmax(x, -1, backend=backend)
        for r in range(9):
            for name, fn in fns.items():
                table[key] = fn
                res[name]["host"].append(per_call(call, 300, 1, synced=False))
                res[name]["wall"].append(per_call(call, 300, 1))
        out = torch.softmax(x.float(), -1)
        for name, fn in fns.items():
            table[key] = fn
            y = call(); ok = torch.allclose(y.float(), out, atol=1e-2)
            print(f"{backend} softmax {shape[0]}x{shape[1]} {name}: host {statistics.median(res[name]['host']):.2f} us, "
                  f"wall {statistics.median(res[name]['wall']):.2f} us, right={ok}", flush=True)
