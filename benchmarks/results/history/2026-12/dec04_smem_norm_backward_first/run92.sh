set -x
shards() {  # name, timeout, pytest args: a summary and the failures kept, the shard logs in one file
  local name=$1 t=$2; shift 2
  DISPATCH_NATIVE=off timeout $((t + 10)) python3 benchmarks/run_tests_sharded.py --shards 8 --timeout $t --out $R/$name "$@" > $R/$name.log 2>&1
  grep -hE "^FAILED|^ERROR|^E  " $R/$name/pytest_shard*.log | head -60 > $R/$name.failures
  cat $R/$name/pytest_shard*.log > $R/$name.all.log; rm -rf $R/$name
  head -1 $R/$name.log; head -20 $R/$name.failures
}
shards tests_norms 170 -k "norm and (tilelang or smem or autograd or grad)" tests/test_gpu_tilelang_smem_norm_backward.py tests/test_gpu_tilelang_smem_norms.py tests/test_gpu_launch.py tests/test_gpu_backends.py tests/test_autograd.py tests/test_tilelang_norms.py
export DISPATCH_CACHE_DIR=/tmp/tunecache
timeout 120 python3 -m dispatch tune layer_norm --shape 256x65536 --dtype bfloat16 --backends tilelang,triton > $R/tune_layer_norm_256x65536.txt 2>&1
tail -25 $R/tune_layer_norm_256x65536.txt
unset DISPATCH_CACHE_DIR
timeout 230 python3 benchmarks/bench_norms.py --quick --backends triton,tilelang --dtypes bfloat16 --ops rms_norm,layer_norm --out $R/norms_bf16 > $R/norms_bf16.log 2>&1
tail -2 $R/norms_bf16.log
grep -E "backward" $R/norms_bf16/norms_sweep.md | head -40
