nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.total --format=csv > $R/gpu.txt 2>&1
python3 -m pytest --collect-only -q tests/test_gpu_tilelang_smem_norms.py 2>/dev/null | grep '::' > /tmp/ids
python3 -m pytest --collect-only -q -k "norm" tests/test_gpu_launch.py tests/test_gpu_backends.py tests/test_gpu_seeds.py 2>/dev/null | grep '::' >> /tmp/ids
wc -l /tmp/ids > $R/gpu_tests_count.txt
(cd /tmp && split -n r/8 /tmp/ids shard_)
for f in /tmp/shard_*; do
  (DISPATCH_NATIVE=off timeout 170 xargs -a $f -d '\n' python3 -m pytest -q -rf -p no:cacheprovider > $R/t_$(basename $f).log 2>&1) &
done
wait
cat $R/t_shard_*.log | grep -v "ThreadSync" > $R/gpu_tests.log; rm $R/t_shard_*.log
for c in layer_norm:32x151936 layer_norm:64x65536 rms_norm:32x151936; do
  op=${c%%:*}; sh=${c##*:}
  timeout 100 python3 benchmarks/profile_call.py --op $op --shape $sh --out $R/profile_${op}_$sh 2>&1 | grep -v "TileLang:\|ThreadSync" > $R/profile_${op}_$sh.log
done
timeout 200 python3 benchmarks/bench_launch.py --ops layer_norm,rms_norm --shapes 64x65536,32x262144,32x151936 --rounds 3 \
  --device-timing --out $R/launch 2>&1 | grep -v "TileLang:\|ThreadSync" > $R/launch.log
echo "launch exit $?" >> $R/launch.log
