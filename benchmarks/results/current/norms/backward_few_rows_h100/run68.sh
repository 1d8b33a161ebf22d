nvidia-smi --query-gpu=name --format=csv,noheader
timeout 330 python3 benchmarks/results/current/norms/backward_few_rows_h100/ab_few_bwd.py 4x262144,8x131072,16x262144,32x131072 bfloat16 2>&1 | tee $R/ab_few_bwd.log | grep -v "^\s*$"
timeout 180 python3 benchmarks/results/current/norms/backward_few_rows_h100/ab_few_bwd.py 4x262144,16x262144,32x131072 float32 2>&1 | tee $R/ab_few_bwd_fp32.log | grep SUMMARY
tar czf $OUT/r.tgz -C /tmp r68
