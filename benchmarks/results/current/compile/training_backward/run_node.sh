nvidia-smi --query-gpu=name --format=csv > $R/gpu.txt
timeout 300 python3 benchmarks/run_tests_sharded.py --shards 12 --timeout 280 --out $R/tests tests/test_compile.py tests/test_autograd.py tests/test_autocast.py tests/test_triton_norms.py > $R/tests.log 2>&1
mkdir -p /tmp/base && tar -xf .gpu/base_dispatch.tar -C /tmp/base
S=8x4096,4096x4096,256x65536
PYTHONPATH=/tmp/base:$PYTHONPATH timeout 120 python3 benchmarks/bench_launch.py --ops rms_norm,layer_norm --shapes $S --grad --compiled-pick --no-compile --rounds 5 --out $R/before > $R/before.log 2>&1
timeout 120 python3 benchmarks/bench_launch.py --ops rms_norm,layer_norm --shapes $S --grad --compiled-pick --no-compile --rounds 5 --out $R/after > $R/after.log 2>&1
