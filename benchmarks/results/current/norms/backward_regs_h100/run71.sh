nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt
AB=benchmarks/results/current/norms/backward_regs_h100/ab_rounds.py  # (.gpu/ab_rounds.py when it ran)
OPS=layer_norm ROUNDS=5 PLANS='[{"maxnreg": 168}]' timeout 230 python3 $AB \
  64x262144,128x262144,64x131072,128x131072,256x131072,256x65536,512x65536,512x32768,1024x32768,2048x32768,8x32768,32x65536,32x32768 \
  bfloat16 > $R/ab_ln_168.log 2>&1
grep SUMMARY $R/ab_ln_168.log
OPS=rms_norm,layer_norm ROUNDS=5 PLANS='[{"BLOCK_N": 1024, "num_warps": 4}]' timeout 230 python3 $AB \
  2x262144,4x262144,8x262144,16x262144,32x262144,4x131072,8x131072,16x131072,32x131072,8x100000 \
  float32 > $R/ab_fp32_few.log 2>&1
grep SUMMARY $R/ab_fp32_few.log
