nvidia-smi --query-gpu=name --format=csv > $R/gpu.txt 2>&1
timeout 280 python3 benchmarks/bench_launch.py --ops layer_norm --shapes 64x65536,32x262144,128x131072,64x262144 --rounds 3 \
  --device-timing --out $R/launch 2>&1 | grep -v "TileLang:\|ThreadSync" > $R/launch.log
echo "launch exit $?" >> $R/launch.log
