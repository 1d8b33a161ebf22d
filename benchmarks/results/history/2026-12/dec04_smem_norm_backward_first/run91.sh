set -x
shards() {  # name, timeout, pytest args: a summary and the failures kept, the shard logs dropped
  local name=$1 t=$2; shift 2
  DISPATCH_NATIVE=off timeout $((t + 10)) python3 benchmarks/run_tests_sharded.py --shards 8 --timeout $t --out $R/$name "$@" > $R/$name.log 2>&1
  grep -hE "^FAILED|^ERROR|^E  " $R/$name/pytest_shard*.log | head -60 > $R/$name.failures
  cat $R/$name/pytest_shard*.log > $R/$name.all.log; rm -rf $R/$name
  head -1 $R/$name.log; head -20 $R/$name.failures
}
shards tests_bwd 200 tests/test_gpu_tilelang_smem_norm_backward.py
shards tests_bucket 140 -k "bucket or longer_R" tests/test_gpu_tilelang_smem.py tests/test_gpu_tilelang_smem_cols.py tests/test_gpu_tilelang_smem_norms.py
grep -E "passed|failed" $R/tests_bucket.all.log | grep "==" 
timeout 300 python3 benchmarks/sweep_smem_norm_backward.py --out $R/sweep --rounds 3 --shapes 16384x1024,4096x4096,1024x16384,256x65536,64x262144 --dtypes bfloat16 --time-limit 200 > $R/sweep.log 2>&1
tail -2 $R/sweep.log; grep -E "FAIL" $R/sweep.log | head -20
