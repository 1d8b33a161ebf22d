nvidia-smi --query-gpu=name --format=csv > $R/gpu.txt
tar czf $OUT/r.tgz -C /tmp r
timeout 80 python3 -m pytest -q -p no:cacheprovider tests/test_triton_norms.py -k "one_launch_exchange" > $R/tests.log 2>&1
tar czf $OUT/r.tgz -C /tmp r
timeout 230 python3 benchmarks/sweep_norm_backward.py --keys AHEAD,maxnreg --shapes 1024x16384,256x65536,64x262144 --ops layer_norm,rms_norm --dtypes bfloat16 --clean-rep 0 --time-limit 200 --out $R/bwd > $R/bwd.log 2>&1
tar czf $OUT/r.tgz -C /tmp r
timeout 150 python3 benchmarks/bench_launch.py --grad --ops layer_norm,rms_norm --shapes 1024x16384,256x65536,64x262144 --rounds 3 --out $R/grad_before > $R/grad_before.log 2>&1
tar czf $OUT/r.tgz -C /tmp r
sed -i 's/over.get("AHEAD", 2)/over.get("AHEAD", 1)/' backends/dispatch_triton/norm_backward.py
tar czf $OUT/r.tgz -C /tmp r
grep -c 'over.get("AHEAD", 1)' backends/dispatch_triton/norm_backward.py >> $R/tests.log
tar czf $OUT/r.tgz -C /tmp r
timeout 60 python3 benchmarks/bench_launch.py --grad --no-compile --ops layer_norm,rms_norm --shapes 1024x16384,256x65536,64x262144 --rounds 3 --out $R/grad_after > $R/grad_after.log 2>&1
tar czf $OUT/r.tgz -C /tmp r
timeout 50 python3 -m pytest -q -p no:cacheprovider tests/test_triton_norms.py -k "one_launch_backward_is_exact" > $R/tests_after.log 2>&1
tar czf $OUT/r.tgz -C /tmp r
