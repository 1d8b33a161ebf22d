set -x
shards() {  # name, timeout, pytest args: a summary and the failures kept, the shard logs in one file
  local name=$1 t=$2; shift 2
  DISPATCH_NATIVE=off timeout $((t + 10)) python3 benchmarks/run_tests_sharded.py --shards 12 --timeout $t --out $R/$name "$@" > $R/$name.log 2>&1
  grep -hE "^FAILED|^ERROR|^E  " $R/$name/pytest_shard*.log | head -60 > $R/$name.failures
  cat $R/$name/pytest_shard*.log > $R/$name.all.log; rm -rf $R/$name
  head -1 $R/$name.log; head -20 $R/$name.failures
}
shards tests 150 -k "norm" tests/test_triton_norms.py tests/test_gpu_backends.py tests/test_autograd.py tests/test_gpu_launch.py
grep -E "passed|failed" $R/tests.all.log | grep "=="
