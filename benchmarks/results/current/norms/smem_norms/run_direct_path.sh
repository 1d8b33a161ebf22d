set -x
python3 -m pytest --collect-only -q tests/test_gpu_tilelang_smem_norms.py 2>/dev/null | grep '::' > /tmp/ids
python3 -m pytest --collect-only -q -k "norm and tilelang" tests/test_gpu_launch.py tests/test_gpu_backends.py 2>/dev/null | grep '::' >> /tmp/ids
wc -l /tmp/ids
cd /tmp && split -n r/8 /tmp/ids shard_ && cd -
for f in /tmp/shard_*; do
  (DISPATCH_NATIVE=off timeout 150 xargs -a $f -d '\n' python3 -m pytest -q -rf -p no:cacheprovider > $R/t_$(basename $f).log 2>&1) &
done
wait
cat $R/t_shard_*.log > $R/gpu_tests.log; rm $R/t_shard_*.log
grep -E "passed|failed|error" $R/gpu_tests.log | grep -E "^[0-9]"; grep -E "^FAILED|^ERROR" $R/gpu_tests.log | head -20
pack
timeout 100 python3 benchmarks/results/current/norms/smem_norms/paths.py > $R/paths.md 2> $R/paths.err
cat $R/paths.md
pack
timeout 190 python3 benchmarks/bench_norms.py --quick --auto --backends triton,tilelang --forward-only --dtypes bfloat16 --ops rms_norm,layer_norm --out $R/norms_bf16 > $R/norms_bf16.log 2>&1
tail -2 $R/norms_bf16.log
grep -E "^\| " $R/norms_bf16/norms_sweep.md | head -20
pack
