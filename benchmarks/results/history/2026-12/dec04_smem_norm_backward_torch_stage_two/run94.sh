set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $R/gpu.txt 2>&1
shards() {  # name, timeout, pytest args: a summary and the failures kept, the shard logs in one file
  local name=$1 t=$2; shift 2
  DISPATCH_NATIVE=off timeout $((t + 10)) python3 benchmarks/run_tests_sharded.py --shards 8 --timeout $t --out $R/$name "$@" > $R/$name.log 2>&1
  grep -hE "^FAILED|^ERROR|^E  " $R/$name/pytest_shard*.log | head -60 > $R/$name.failures
  cat $R/$name/pytest_shard*.log > $R/$name.all.log; rm -rf $R/$name
  head -1 $R/$name.log; head -20 $R/$name.failures
}
SH=16384x1024,4096x4096,1024x16384,256x65536,64x262144
# the batched all-reduce (new) against the module before it (old), each shape's default config, then short rows' configs
timeout 110 python3 benchmarks/sweep_smem_norm_backward.py --out $R/sweep_new --pick default --rounds 3 --shapes $SH --dtypes bfloat16 > $R/sweep_new.log 2>&1
cp backends/dispatch_tilelang/smem_norm_backward.py /tmp/new.py; cp .gpu/old/smem_norm_backward.py backends/dispatch_tilelang/
timeout 110 python3 benchmarks/sweep_smem_norm_backward.py --out $R/sweep_old --pick default --rounds 3 --shapes $SH --dtypes bfloat16 > $R/sweep_old.log 2>&1
cp /tmp/new.py backends/dispatch_tilelang/smem_norm_backward.py
grep -E "FAIL|built" $R/sweep_new.log $R/sweep_old.log | head
paste -d'\n' <(grep -E "tilelang smem" $R/sweep_new/smem_norm_backward.md) <(grep -E "tilelang smem" $R/sweep_old/smem_norm_backward.md)
grep -E "triton" $R/sweep_new/smem_norm_backward.md
timeout 100 python3 benchmarks/sweep_smem_norm_backward.py --out $R/sweep_short --rounds 3 --shapes 16384x1024,8192x2048 --dtypes bfloat16 > $R/sweep_short.log 2>&1
grep -E "FAIL|built" $R/sweep_short.log | head; grep -E "^\| " $R/sweep_short/smem_norm_backward.md
shards tests_norms 170 -k "norm and (tilelang or smem or autograd or grad)" tests/test_gpu_tilelang_smem_norm_backward.py tests/test_gpu_tilelang_smem_norms.py tests/test_gpu_launch.py tests/test_gpu_backends.py tests/test_autograd.py tests/test_tilelang_norms.py
