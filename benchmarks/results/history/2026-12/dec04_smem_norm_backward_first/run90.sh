set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $R/gpu.txt 2>&1
# the smem norm backward: GPU tests, then the pending bucket-bottom tests, in parallel shards
DISPATCH_NATIVE=off timeout 200 python3 benchmarks/run_tests_sharded.py --shards 8 --timeout 190 --out $R/tests_bwd tests/test_gpu_tilelang_smem_norm_backward.py > $R/tests_bwd.log 2>&1
tail -3 $R/tests_bwd.log; grep -hE "^FAILED|^E  " $R/tests_bwd/pytest_shard*.log | head -30
DISPATCH_NATIVE=off timeout 150 python3 benchmarks/run_tests_sharded.py --shards 8 --timeout 140 --out $R/tests_bucket -k "bucket or longer_R" tests/test_gpu_tilelang_smem.py tests/test_gpu_tilelang_smem_cols.py tests/test_gpu_tilelang_smem_norms.py > $R/tests_bucket.log 2>&1
tail -3 $R/tests_bucket.log; grep -hE "^FAILED" $R/tests_bucket/pytest_shard*.log | head -10
timeout 330 python3 benchmarks/sweep_smem_norm_backward.py --out $R/sweep --time-limit 200 > $R/sweep.log 2>&1
tail -3 $R/sweep.log; grep -E "FAIL" $R/sweep.log | head -20
grep -E "^\| " $R/sweep/smem_norm_backward.md | head -80
