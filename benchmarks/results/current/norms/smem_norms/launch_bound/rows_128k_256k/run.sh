nvidia-smi --query-gpu=name --format=csv > $R/gpu.txt 2>&1
timeout 330 python3 benchmarks/sweep_smem_norms.py --dtypes bfloat16,float16 --ops layer_norm,rms_norm \
  --shapes 128x98304,96x114688,128x131072 --rounds 3 --time-limit 230 --out $R/sweep 2>&1 | grep -v "TileLang:\|ThreadSync" > $R/sweep.log
echo "sweep exit $?" >> $R/sweep.log
