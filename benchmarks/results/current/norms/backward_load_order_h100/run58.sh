nvidia-smi --query-gpu=name --format=csv > $R/gpu.txt; cat $R/gpu.txt
export SHAPES=8x131072,4x262144,16x262144,32x131072,256x65536,1024x16384,64x262144
for v in old new2 new new2 old; do
  cp AB/$v/*.py backends/dispatch_triton/
  timeout 80 python3 AB/ab_bwd.py $v >> $R/ab.log 2> $R/ab_$v.err; echo "$v rc $?"
done
cp AB/new2/*.py backends/dispatch_triton/
python3 - $R/ab.log <<'PY'
import sys, collections
rows = collections.defaultdict(dict)
for l in open(sys.argv[1]):
    p = [s.strip() for s in l.split("|")]
    if len(p) < 4: continue
    rows[p[1]].setdefault(p[0], []).append(float(p[2]))
for k, d in rows.items():
    o, n, n2 = d.get("old", []), d.get("new", []), d.get("new2", [])
    if o and n2:
        print(f"{k:36s} old {min(o):5.1f} new {min(n) if n else 0:5.1f} new2 {min(n2):5.1f}  new2/old {min(n2)/min(o):.3f}")
PY
tar czf $OUT/r.tgz -C /tmp r58
