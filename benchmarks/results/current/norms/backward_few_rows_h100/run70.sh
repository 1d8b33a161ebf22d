nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt
AB=benchmarks/results/current/norms/backward_few_rows_h100/ab_few_bwd.py  # (.gpu/ab_few_bwd.py when it ran)
DISPATCH_NATIVE=off timeout 150 python3 benchmarks/run_tests_sharded.py --shards 12 --timeout 140 --out $R/suite \
  -k "backward or cooperative or exact or few_long" tests/test_triton_norms.py tests/test_norm_edge_cases.py > $R/suite.log 2>&1
tail -4 $R/suite.log
OPS=layer_norm PLANS='[{"BLOCK_N": 2048, "num_warps": 4}]' timeout 110 python3 $AB \
  4x262144,8x131072,32x131072,1x262144,16x262144,8x32768,32x65536 bfloat16 > $R/ab_few.log 2>&1
grep SUMMARY $R/ab_few.log
timeout 100 python3 benchmarks/bench_launch.py --grad --ops layer_norm --shapes 4x262144,32x131072 \
  --dtype bfloat16 --rounds 5 --out $R/launch_grad > $R/launch_grad.log 2>&1
cat $R/launch_grad/launch.md
OPS=layer_norm PLANS='[{"BLOCK_N": 1024, "num_warps": 4}, {"maxnreg": 168}]' timeout 110 python3 $AB \
  64x262144,128x131072,256x65536,512x32768 bfloat16 > $R/ab_many_ln.log 2>&1
grep SUMMARY $R/ab_many_ln.log
OPS=rms_norm PLANS='[{"BLOCK_N": 1024, "num_warps": 4}, {"maxnreg": 168}]' timeout 80 python3 $AB \
  64x262144,256x65536,512x32768 bfloat16 > $R/ab_many_rms.log 2>&1
grep SUMMARY $R/ab_many_rms.log
OPS=rms_norm,layer_norm PLANS='[{"BLOCK_N": 1024, "num_warps": 4}]' timeout 80 python3 $AB \
  4x262144,16x262144,32x131072 float32 > $R/ab_few_fp32.log 2>&1
grep SUMMARY $R/ab_few_fp32.log
