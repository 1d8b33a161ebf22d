nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt
AB=benchmarks/results/current/norms/backward_regs_h100/ab_rounds.py
OPS=layer_norm ROUNDS=5 PLANS='[{"maxnreg": 128}]' timeout 130 python3 $AB \
  64x262144,64x131072,256x65536,512x32768,1024x32768,32x65536 bfloat16 > $R/ab_ln_regs.log 2>&1
grep SUMMARY $R/ab_ln_regs.log
OPS=rms_norm,layer_norm ROUNDS=5 PLANS='[{"BLOCK_N": 2048, "num_warps": 8}]' timeout 110 python3 $AB \
  2x262144,8x131072,32x131072,16x262144 float32 > $R/ab_fp32_few.log 2>&1
grep SUMMARY $R/ab_fp32_few.log
DISPATCH_NATIVE=off timeout 200 python3 benchmarks/run_tests_sharded.py --shards 14 --timeout 190 --out /tmp/suite \
  tests/test_triton_kernels.py tests/test_triton_direct.py tests/test_logsumexp_steps.py tests/test_softmax_edge_cases.py \
  tests/test_gpu_launch.py tests/test_triton_norms.py -k "not sweep" > $R/suite.log 2>&1
head -1 $R/suite.log; grep -h "FAILED" /tmp/suite/*.log | head -10; tar czf $R/suite_shards.tgz -C /tmp suite
