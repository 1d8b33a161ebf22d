nvidia-smi --query-gpu=name --format=csv > $R/gpu.txt
timeout 90 python3 benchmarks/sweep_norm_backward.py --keys maxnreg --shapes 1024x16384,2048x16384,1638x10240,256x65536 --ops layer_norm --dtypes bfloat16 --clean-rep 0 --time-limit 70 --out $R/bwd > $R/bwd.log 2>&1
tar czf $OUT/r.tgz -C /tmp r
timeout 90 python3 -m pytest -q -x -p no:cacheprovider tests/test_triton_norms.py -k "layer_norm or exchange or default" > $R/tests.log 2>&1
tar czf $OUT/r.tgz -C /tmp r
timeout 55 python3 benchmarks/bench_launch.py --grad --ops layer_norm --shapes 1024x16384,2048x16384 --rounds 3 --out $R/grad > $R/grad.log 2>&1
tar czf $OUT/r.tgz -C /tmp r
