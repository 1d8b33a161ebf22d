nvidia-smi --query-gpu=name --format=csv > $R/gpu.txt; cat $R/gpu.txt; git log --oneline | head -1 > $R/commit.txt
for v in base first-shift zero-shift zero-shift first-shift base; do
  timeout 120 python3 benchmarks/results/current/norms/layer_norm_coop/shift_h100/ab_shift.py $v $v >> $R/ab.log 2> $R/ab_$v.err; echo "$v rc $?"
done
python3 - $R/ab.log <<'PY'
import sys, collections
rows = collections.defaultdict(dict)
for l in open(sys.argv[1]):
    p = [s.strip() for s in l.split("|")]
    if len(p) < 4: continue
    rows[p[1]].setdefault(p[0], []).append(float(p[2]))
for k, d in rows.items():
    b = min(d.get("base", [0]))
    print(f"{k:34s} " + " ".join(f"{v} {' '.join(f'{x:5.1f}' for x in d.get(v, []))} ({min(d[v]) / b:.3f})" for v in ("base", "first-shift", "zero-shift") if v in d))
PY
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1); echo "ncu: $NCU"
for v in base first-shift zero-shift; do
  timeout 100 $NCU --kernel-name regex:_norm_fwd --launch-skip 3 --launch-count 1 --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis_Tables \
    python3 benchmarks/profile_norm_coop.py --op layer_norm --variant $v > $R/ncu_$v.txt 2>&1; echo "ncu $v rc $?"
  grep -E "Duration|Registers Per|Stall|Warp Cycles Per Issued|Achieved Occ|DRAM Through" $R/ncu_$v.txt | head -12
done
tar czf $OUT/r.tgz -C /tmp r61
