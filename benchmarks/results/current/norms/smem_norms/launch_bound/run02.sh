nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.total --format=csv > $R/gpu.txt 2>&1
python3 -m pytest --collect-only -q tests/test_gpu_tilelang_smem_norms.py tests/test_tilelang_smem_norms.py 2>/dev/null | grep '::' > /tmp/ids
python3 -m pytest --collect-only -q -k "norm and tilelang" tests/test_gpu_launch.py tests/test_gpu_backends.py 2>/dev/null | grep '::' >> /tmp/ids
wc -l /tmp/ids > $R/gpu_tests_count.txt
(cd /tmp && split -n r/8 /tmp/ids shard_)
for f in /tmp/shard_*; do
  (DISPATCH_NATIVE=off timeout 140 xargs -a $f -d '\n' python3 -m pytest -q -rf -p no:cacheprovider > $R/t_$(basename $f).log 2>&1) &
done
wait
cat $R/t_shard_*.log | grep -v "ThreadSync" > $R/gpu_tests.log; rm $R/t_shard_*.log
timeout 250 python3 benchmarks/sweep_smem_norms.py --bound-twin --dtypes bfloat16 --ops layer_norm,rms_norm \
  --shapes 64x262144,32x151936,128x131072 --rounds 5 --time-limit 150 --out $R/sweep 2>&1 | grep -v "TileLang:\|ThreadSync" > $R/sweep.log
echo "sweep exit $?" >> $R/sweep.log
timeout 170 python3 benchmarks/bench_launch.py --ops layer_norm,rms_norm --shapes 64x262144,32x151936 --rounds 3 \
  --out $R/launch 2>&1 | grep -v "TileLang:\|ThreadSync" > $R/launch.log
echo "launch exit $?" >> $R/launch.log
