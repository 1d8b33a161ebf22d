# tests first: the pending norm backward finish, the COOP forward with WB_EACH, the smem norm kernels
timeout 240 python3 -m pytest -q -x tests/test_triton_norms.py -k "finish or frozen or cooperative" > $R/tests_norms.log 2>&1; tail -3 $R/tests_norms.log
timeout 240 python3 -m pytest -q -x tests/test_gpu_tilelang_smem_norms.py tests/test_tilelang_smem_norms.py > $R/tests_smem_norms.log 2>&1; tail -3 $R/tests_smem_norms.log
cd benchmarks
timeout 330 python3 sweep_norm_configs.py --quick --only "coop bn2048" --ops layer_norm,rms_norm --dtypes bfloat16,float32 \
  --ns 65536,262144 --time-limit 300 --out $R/coop > $R/coop.log 2>&1
tail -2 $R/coop.log
grep -E "^\| (coop bn2048|same-size|.*default)" $R/coop/norm_configs.md | cut -c1-90 | head -80
