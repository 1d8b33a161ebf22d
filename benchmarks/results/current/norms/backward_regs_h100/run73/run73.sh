nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt
DISPATCH_NATIVE=off timeout 200 python3 benchmarks/run_tests_sharded.py --shards 14 --timeout 190 --out /tmp/suite \
  -k "column_sums_finished or few_long or default_exchanges or backward" tests/test_triton_norms.py tests/test_norms.py \
  > $R/suite.log 2>&1
head -1 $R/suite.log; grep -h "FAILED\|Error" /tmp/suite/*.log | head -20
timeout 200 python3 benchmarks/results/current/norms/backward_regs_h100/run73/sync_probe.py layer_norm:512x32768,layer_norm:64x262144,layer_norm:4096x4096,rms_norm:64x262144 \
  > $R/sync_probe.log 2>&1
grep -v "^\s*$" $R/sync_probe.log | grep -v "TileLang\|Warning" | head -120
tar czf $R/suite_shards.tgz -C /tmp suite
