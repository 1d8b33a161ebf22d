nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt
DISPATCH_NATIVE=off timeout 240 python3 benchmarks/run_tests_sharded.py --shards 14 --timeout 230 --out /tmp/suite \
  tests/test_triton_norms.py tests/test_norm_edge_cases.py tests/test_autograd.py > $R/suite.log 2>&1
tail -3 $R/suite.log; cp /tmp/suite/pytest_summary.txt $R/ 2>/dev/null; tar czf $R/suite_shards.tgz -C /tmp suite
timeout 120 python3 benchmarks/bench_launch.py --grad --ops layer_norm --shapes 512x32768,64x262144 \
  --dtype bfloat16 --rounds 5 --out $R/launch_ln_bf16 > $R/launch_ln_bf16.log 2>&1
grep "^layer_norm" $R/launch_ln_bf16.log
timeout 120 python3 benchmarks/bench_launch.py --grad --ops rms_norm,layer_norm --shapes 4x131072,32x131072 \
  --dtype float32 --rounds 5 --out $R/launch_fp32 > $R/launch_fp32.log 2>&1
grep "(forward" $R/launch_fp32.log
AB=benchmarks/results/current/norms/backward_regs_h100/ab_rounds.py
OPS=layer_norm PLANS='[{"maxnreg": 128}]' timeout 40 python3 $AB 8x32768 bfloat16 > $R/alone.log 2>&1
OPS=layer_norm PLANS='[{"maxnreg": 128}]' timeout 60 python3 $AB 2048x32768,8x32768 bfloat16 > $R/after.log 2>&1
OPS=layer_norm PLANS='[]' timeout 40 python3 benchmarks/results/current/norms/backward_few_rows_h100/ab_few_bwd.py 8x32768 bfloat16 > $R/few_alone.log 2>&1
grep -h "8x32768 |" $R/alone.log $R/after.log $R/few_alone.log | cut -c1-150
