nvidia-smi --query-gpu=name --format=csv > $R/gpu.txt; cat $R/gpu.txt
cp AB/new/*.py backends/dispatch_triton/
timeout 230 python3 -m pytest -q -p no:cacheprovider tests/test_triton_norms.py tests/test_norm_edge_cases.py -k "backward or cooperative or exact" > $R/tests_bwd.log 2>&1; echo "tests rc $?"; tail -3 $R/tests_bwd.log
for v in new old; do
  cp AB/$v/*.py backends/dispatch_triton/
  timeout 110 python3 AB/ab_bwd.py $v >> $R/ab.log 2> $R/ab_$v.err; echo "$v rc $?"
done
cp AB/new/*.py backends/dispatch_triton/
python3 - $R/ab.log <<'PY'
import sys, collections
rows = collections.defaultdict(dict)
for l in open(sys.argv[1]):
    p = [s.strip() for s in l.split("|")]
    if len(p) < 4: continue
    rows[p[1]].setdefault(p[0], []).append((float(p[2]), p[3]))
for k, d in rows.items():
    o, n = d.get("old", []), d.get("new", [])
    if o and n:
        print(f"{k:45s} old {min(o)[0]:7.1f} {min(o)[1]} new {min(n)[0]:7.1f} {min(n)[1]} {min(n)[0]/min(o)[0]:.3f}")
PY
timeout 200 python3 benchmarks/bench_launch.py --grad --device-timing --ops rms_norm,layer_norm --shapes 1024x16384,256x65536,64x262144 --dtype bfloat16 --rounds 5 --out $R/launch_grad > $R/launch_grad.log 2>&1; echo "launch rc $?"; cat $R/launch_grad/launch.md
tar czf $OUT/r.tgz -C /tmp r56
