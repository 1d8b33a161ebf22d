"""SASS opcode counts of the Triton kernels in the cache: python3 sass_hist.py [name-substring ...]"""
import collections, glob, json, os, re, shutil, subprocess, sys
tool = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
want = sys.argv[1:]
for cubin in sorted(glob.glob(os.path.expanduser("~/.triton/cache/**/*.cubin"), recursive=True)):
    name = os.path.basename(cubin)[:-6]
    if want and not any(w in name for w in want):
        continue
    meta = {}
    j = cubin[:-6] + ".json"
    if os.path.exists(j):
        m = json.load(open(j))
        meta = {k: m.get(k) for k in ("num_warps", "n_regs", "constants") if k in m}
    out = subprocess.run([tool, "-sass", cubin], capture_output=True, text=True).stdout
    ops = collections.Counter()
    for line in out.splitlines():
        mm = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if mm:
            ops[mm.group(2).split(".")[0]] += 1
    print("==", name, os.path.dirname(cubin)[-12:], meta, "total", sum(ops.values()))
    print("  ", ", ".join(f"{k} {v}" for k, v in ops.most_common(24)))
