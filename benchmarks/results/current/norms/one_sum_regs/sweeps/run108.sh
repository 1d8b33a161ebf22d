set -x
shards() {  # name, timeout, pytest args: a summary and the failures kept, the shard logs in one file
  local name=$1 t=$2; shift 2
  DISPATCH_NATIVE=off timeout $((t + 10)) python3 benchmarks/run_tests_sharded.py --shards 12 --timeout $t --out $R/$name "$@" > $R/$name.log 2>&1
  grep -hE "^FAILED|^ERROR|^E  " $R/$name/pytest_shard*.log | head -60 > $R/$name.failures
  cat $R/$name/pytest_shard*.log > $R/$name.all.log; rm -rf $R/$name
  head -1 $R/$name.log; head -20 $R/$name.failures
}
cd benchmarks
timeout 130 python3 sweep_norm_configs.py --ops rms_norm,layer_norm --ns 1024,4096,8192,16384 --dtypes float32 --time-limit 110 --out $R/sweep_fp32 > $R/sweep_fp32.log 2>&1
grep -E "^\[ " $R/sweep_fp32.log | grep "/8 " | tail -8
cd ..
timeout 200 python3 benchmarks/bench_norms.py --quick --auto --forward-only --ops rms_norm,layer_norm --dtypes bfloat16,float32 --out $R/bench_fwd > $R/bench_fwd.log 2>&1
grep "| for" $R/bench_fwd/norms_sweep.md | head -40
shards tests 170 -k "(norm or column_sums) and not every_config_at_a_length" tests/test_triton_norms.py tests/test_gpu_tilelang_column_sums.py tests/test_gpu_tilelang_smem_norm_backward.py tests/test_gpu_tilelang_smem_norms.py tests/test_tilelang_norms.py tests/test_tilelang_smem_norm_backward.py tests/test_autograd.py tests/test_gpu_backends.py
grep -E "passed|failed" $R/tests.all.log | grep "=="
