nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.total --format=csv > $R/gpu.txt 2>&1
for c in layer_norm:32x151936 layer_norm:64x65536 rms_norm:32x151936 softmax:32x151936; do
  op=${c%%:*}; sh=${c##*:}
  timeout 120 python3 benchmarks/profile_call.py --op $op --shape $sh --out $R/profile_${op}_$sh 2>&1 | grep -v "TileLang:\|ThreadSync" > $R/profile_${op}_$sh.log
done
timeout 200 python3 benchmarks/bench_launch.py --ops layer_norm --shapes 64x65536,64x131072,32x262144 --rounds 3 \
  --out $R/launch 2>&1 | grep -v "TileLang:\|ThreadSync" > $R/launch.log
echo "launch exit $?" >> $R/launch.log
