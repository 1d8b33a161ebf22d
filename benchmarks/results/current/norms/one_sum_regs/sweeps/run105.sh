set -x
shards() {  # name, timeout, pytest args: a summary and the failures kept, the shard logs in one file
  local name=$1 t=$2; shift 2
  DISPATCH_NATIVE=off timeout $((t + 10)) python3 benchmarks/run_tests_sharded.py --shards 8 --timeout $t --out $R/$name "$@" > $R/$name.log 2>&1
  grep -hE "^FAILED|^ERROR|^E  " $R/$name/pytest_shard*.log | head -60 > $R/$name.failures
  cat $R/$name/pytest_shard*.log > $R/$name.all.log; rm -rf $R/$name
  head -1 $R/$name.log; head -20 $R/$name.failures
}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv
cd benchmarks
timeout 330 python3 sweep_norm_configs.py --quick --ops layer_norm --dtypes bfloat16,float32 --time-limit 300 --out $R/sweep_ln > $R/sweep_ln.log 2>&1
grep -E "^\[" $R/sweep_ln.log | tail -20
timeout 130 python3 sweep_norm_configs.py --quick --ops rms_norm --ns 65536,262144 --dtypes bfloat16,float32 --time-limit 110 --out $R/sweep_rms > $R/sweep_rms.log 2>&1
grep -E "^\[" $R/sweep_rms.log | tail -8
cd ..
shards tests_configs 120 tests/test_gpu_tilelang_smem_norm_backward.py::test_every_config_at_a_length
grep -E "passed|failed" $R/tests_configs.all.log | grep "=="
