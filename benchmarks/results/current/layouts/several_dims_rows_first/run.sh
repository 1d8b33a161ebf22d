nvidia-smi --query-gpu=name --format=csv > $R/gpu.txt
mkdir -p /tmp/base && tar -xf .gpu/base.tar -C /tmp/base
C=dims12_64x512x512,dims02_512x64x512,dims02_4096x64x128,dims13_16x64x32x256
PYTHONPATH=/tmp/base:$PYTHONPATH python3 -c "import dispatch_triton, dispatch; print(dispatch_triton.__file__, dispatch.__file__)" > $R/base_paths.txt 2>&1
PYTHONPATH=/tmp/base:$PYTHONPATH timeout 150 python3 benchmarks/bench_layouts.py --cases $C --dtypes bfloat16,float32 --ops logsumexp --no-compile --no-tune --out $R/before > $R/before.log 2>&1
timeout 240 python3 benchmarks/bench_layouts.py --cases $C --dtypes bfloat16,float32 --ops logsumexp --no-tune --device-timing --out $R/after > $R/after.log 2>&1
timeout 170 python3 benchmarks/run_tests_sharded.py --shards 12 --timeout 160 --out /tmp/tests tests/test_logsumexp_steps.py tests/test_triton_strided.py tests/test_tilelang_strided.py > $R/tests.log 2>&1
tar czf $R/tests.tgz -C /tmp tests
