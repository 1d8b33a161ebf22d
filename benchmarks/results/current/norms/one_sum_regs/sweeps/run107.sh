set -x
shards() {  # name, timeout, pytest args: a summary and the failures kept, the shard logs in one file
  local name=$1 t=$2; shift 2
  DISPATCH_NATIVE=off timeout $((t + 10)) python3 benchmarks/run_tests_sharded.py --shards 8 --timeout $t --out $R/$name "$@" > $R/$name.log 2>&1
  grep -hE "^FAILED|^ERROR|^E  " $R/$name/pytest_shard*.log | head -60 > $R/$name.failures
  cat $R/$name/pytest_shard*.log > $R/$name.all.log; rm -rf $R/$name
  head -1 $R/$name.log; head -20 $R/$name.failures
}
timeout 120 python3 .gpu/ind.py $R/inductor > $R/ind.log 2>&1; tail -2 $R/ind.log
cd benchmarks
timeout 120 python3 sweep_norm_configs.py --ops rms_norm,layer_norm --ns 1024,4096,16384 --dtypes float32 --time-limit 100 --out $R/sweep_fp32 > $R/sweep_fp32.log 2>&1
grep -E "^\[ " $R/sweep_fp32.log | grep "/6 " | tail -6
cd ..
shards tests 200 -k "(norm or column_sums) and not every_config_at_a_length" tests/test_triton_norms.py tests/test_gpu_tilelang_column_sums.py tests/test_gpu_tilelang_smem_norm_backward.py tests/test_gpu_tilelang_smem_norms.py tests/test_tilelang_norms.py tests/test_tilelang_smem_norm_backward.py tests/test_autograd.py tests/test_gpu_backends.py
grep -E "passed|failed" $R/tests.all.log | grep "=="
