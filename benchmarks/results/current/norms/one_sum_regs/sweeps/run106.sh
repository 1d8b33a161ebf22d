set -x
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv
cd benchmarks
timeout 150 python3 sweep_norm_configs.py --quick --ops layer_norm --ns 2048,4096,8192,16384 --dtypes bfloat16,float32 --time-limit 130 --out $R/sweep_ln > $R/sweep_ln.log 2>&1
grep -E "^\[ " $R/sweep_ln.log | grep "/8 " | tail -8
timeout 90 python3 sweep_norm_configs.py --quick --ops rms_norm --ns 65536,262144 --dtypes bfloat16,float32 --time-limit 70 --out $R/sweep_rms > $R/sweep_rms.log 2>&1
grep -E "^\[ " $R/sweep_rms.log | grep "/4 " | tail -4
cd ..
timeout 280 python3 benchmarks/bench_norms.py --quick --auto --forward-only --ops rms_norm,layer_norm --dtypes bfloat16,float32 --out $R/bench_fwd > $R/bench_fwd.log 2>&1
tail -3 $R/bench_fwd.log; grep "| for" $R/bench_fwd/norms_sweep.md | head -40
