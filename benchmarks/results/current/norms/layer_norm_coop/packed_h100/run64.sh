nvidia-smi --query-gpu=name --format=csv > $R/gpu.txt; cat $R/gpu.txt; git log --oneline | head -1 > $R/commit.txt
timeout 280 python3 benchmarks/results/current/norms/layer_norm_coop/packed_h100/ab_pack.py > $R/ab_pack.log 2>&1; echo "pack rc $?"; cat $R/ab_pack.log | cut -c1-420
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_triton_norms.py -k "cooperative or packed or massive" tests/test_triton_direct.py > $R/gpu_tests.log 2>&1; echo "tests rc $?"; tail -3 $R/gpu_tests.log
timeout 120 python3 benchmarks/bench_launch.py --ops layer_norm --shapes 64x262144,128x131072,32x262144,64x65536 --dtype bfloat16 --rounds 3 --device-timing --out $R/launch > $R/launch.log 2>&1; echo "launch rc $?"; grep "^| [a-z]" $R/launch/launch.md | head
tar czf $OUT/r.tgz -C /tmp r64
