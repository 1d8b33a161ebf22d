nvidia-smi --query-gpu=name --format=csv > $R/gpu.txt; cat $R/gpu.txt
for v in old new old new; do
  cp AB/$v/*.py backends/dispatch_triton/
  timeout 140 python3 AB/ab_pipe.py $v >> $R/ab.log 2> $R/ab_$v.err; echo "$v rc $?"
done
cp AB/new/*.py backends/dispatch_triton/
python3 - $R/ab.log <<'PY'
import sys, collections
rows = collections.defaultdict(dict)
for l in open(sys.argv[1]):
    p = [s.strip() for s in l.split("|")]
    if len(p) < 4: continue
    rows[p[1]].setdefault(p[0], []).append(float(p[2]))
for k, d in rows.items():
    o, n = d.get("old", []), d.get("new", [])
    if o and n:
        print(f"{k:45s} old {min(o):7.1f} new {min(n):7.1f}  {min(n)/min(o):.3f}")
PY
tar czf $OUT/r.tgz -C /tmp r55
