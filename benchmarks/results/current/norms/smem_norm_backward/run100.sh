set -x
D=benchmarks/results/current/norms/smem_norm_backward
timeout 150 python3 $D/host_times.py > $R/host_times.log 2>&1; grep -v "TileLang begins\|TileLang completes" $R/host_times.log | tail -6
timeout 250 python3 $D/step_times.py > $R/step_times.log 2>&1; grep -v "TileLang begins\|TileLang completes" $R/step_times.log | tail -30
