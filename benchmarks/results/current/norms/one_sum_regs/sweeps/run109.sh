set -x
cd benchmarks
timeout 100 python3 sweep_norm_configs.py --quick --ops rms_norm --ns 1024,4096,8192 --dtypes float32 --time-limit 80 --out $R/sweep_fp32 > $R/sweep_fp32.log 2>&1
grep -E "^\[ " $R/sweep_fp32.log | grep "/3 " | tail -3
cd ..
timeout 200 python3 benchmarks/bench_norms.py --quick --auto --forward-only --ops rms_norm,layer_norm --dtypes bfloat16,float32 --out $R/bench_fwd > $R/bench_fwd.log 2>&1
grep "| for" $R/bench_fwd/norms_sweep.md | head -40
DISPATCH_NATIVE=off timeout 200 python3 -m pytest -q -x "tests/test_gpu_tilelang_smem_norms.py::test_a_config_from_the_top_of_a_bucket_at_its_bottom" > $R/bucket_test.log 2>&1; tail -3 $R/bucket_test.log
