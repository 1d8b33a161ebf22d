nvidia-smi --query-gpu=name --format=csv > $R/gpu.txt; cat $R/gpu.txt
export SHAPES=8x131072,16x262144,4x262144,32x131072,256x65536
for v in old new old new; do
  cp AB/$v/*.py backends/dispatch_triton/
  timeout 70 python3 AB/ab_bwd.py $v >> $R/ab.log 2> $R/ab_$v.err; echo "$v rc $?"
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
        print(f"{k:40s} old {' '.join(f'{v:5.1f}' for v in o)} new {' '.join(f'{v:5.1f}' for v in n)} {min(n)/min(o):.3f}")
PY
timeout 200 python3 benchmarks/sweep_norm_backward.py --ops layer_norm,rms_norm --dtypes bfloat16,float32 --shapes 256x65536 --keys maxnreg --time-limit 180 --out $R/caps > $R/caps.log 2>&1; echo "caps rc $?"
sed -n '/^## Summary/,/^Cells/p' $R/caps/norm_backward.md | cut -c1-400
grep -E "^\| (bn|same|torch)" $R/caps/norm_backward.md | cut -c1-150 | head -40
tar czf $OUT/r.tgz -C /tmp r57
