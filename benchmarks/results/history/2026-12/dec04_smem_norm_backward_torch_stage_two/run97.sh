set -x
shards() {  # name, timeout, pytest args: a summary and the failures kept, the shard logs in one file
  local name=$1 t=$2; shift 2
  DISPATCH_NATIVE=off timeout $((t + 10)) python3 benchmarks/run_tests_sharded.py --shards 8 --timeout $t --out $R/$name "$@" > $R/$name.log 2>&1
  grep -hE "^FAILED|^ERROR|^E  " $R/$name/pytest_shard*.log | head -60 > $R/$name.failures
  cat $R/$name/pytest_shard*.log > $R/$name.all.log; rm -rf $R/$name
  head -1 $R/$name.log; head -20 $R/$name.failures
}
timeout 150 python3 .gpu/gt.py > $R/gt.log 2>&1; grep -v "TileLang\|Warning" $R/gt.log
shards tests_configs 200 tests/test_gpu_tilelang_smem_norm_backward.py::test_every_config_at_a_length
grep -E "passed|failed" $R/tests_configs.all.log | grep "=="
shards tests_rest 130 -k "norm and (tilelang or smem or autograd or grad) and not every_config_at_a_length" tests/test_gpu_tilelang_smem_norm_backward.py tests/test_gpu_tilelang_smem_norms.py tests/test_gpu_launch.py tests/test_gpu_backends.py tests/test_autograd.py tests/test_tilelang_norms.py
grep -E "passed|failed" $R/tests_rest.all.log | grep "=="
