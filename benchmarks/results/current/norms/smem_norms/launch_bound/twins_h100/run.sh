nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.total --format=csv > $R/gpu.txt 2>&1
timeout 540 python3 benchmarks/sweep_smem_norms.py --bound --two-walks --dtypes bfloat16 --ops layer_norm,rms_norm \
  --shapes 256x65536,64x262144,512x32768,128x131072,1024x16384,32x151936 --rounds 3 --time-limit 360 \
  --out $R/sweep 2>&1 | grep -v "TileLang:" > $R/sweep.log
echo "sweep exit $?" >> $R/sweep.log
