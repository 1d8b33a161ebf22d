nvidia-smi --query-gpu=name --format=csv > $R/gpu.txt; cat $R/gpu.txt
cp AB/cur/*.py backends/dispatch_triton/
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_triton_norms.py tests/test_norm_edge_cases.py -k "backward or cooperative or exact" > $R/tests_bwd.log 2>&1; echo "tests rc $?"; tail -2 $R/tests_bwd.log
for v in cur fwd2 cur fwd2; do
  cp AB/$v/*.py backends/dispatch_triton/
  timeout 60 python3 AB/ab_fwd.py $v >> $R/ab.log 2> $R/ab_$v.err; echo "$v rc $?"
done
cp AB/cur/*.py backends/dispatch_triton/
python3 - $R/ab.log <<'PY'
import sys, collections
rows = collections.defaultdict(dict)
for l in open(sys.argv[1]):
    p = [s.strip() for s in l.split("|")]
    if len(p) < 4: continue
    rows[p[1]].setdefault(p[0], []).append(float(p[2]))
for k, d in rows.items():
    o, n = d.get("cur", []), d.get("fwd2", [])
    if o and n:
        print(f"{k:44s} cur {' '.join(f'{v:5.1f}' for v in o)} fwd2 {' '.join(f'{v:5.1f}' for v in n)} {min(n)/min(o):.3f}")
PY
tar czf $OUT/r.tgz -C /tmp r59
