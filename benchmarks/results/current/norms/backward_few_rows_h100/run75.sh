nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt
OPS=rms_norm ROUNDS=5 PLANS='[{"BLOCK_N": 1024, "num_warps": 4}]' timeout 150 python3 benchmarks/results/current/norms/backward_regs_h100/ab_rounds.py \
  1x262144,2x262144,4x262144,8x262144,1x131072,2x131072,4x131072,8x131072,16x131072,8x100000 bfloat16 > $R/ab_rms_few.log 2>&1
grep SUMMARY $R/ab_rms_few.log
