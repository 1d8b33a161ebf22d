nvidia-smi --query-gpu=name --format=csv > $R/gpu.txt
mkdir -p /tmp/base && tar -xf .gpu/base_dispatch.tar -C /tmp/base
S=8x4096,4096x4096,1024x16384,256x65536
PYTHONPATH=/tmp/base:$PYTHONPATH python3 -c "import dispatch; print(dispatch.__file__)" > $R/before_path.txt 2>&1
PYTHONPATH=/tmp/base:$PYTHONPATH timeout 200 python3 benchmarks/bench_launch.py --ops rms_norm,layer_norm --shapes $S --grad --compiled-pick --no-compile --rounds 3 --out $R/before > $R/before.log 2>&1
timeout 200 python3 benchmarks/bench_launch.py --ops rms_norm,layer_norm --shapes $S --grad --compiled-pick --rounds 3 --out $R/after > $R/after.log 2>&1
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_compile.py tests/test_autograd.py > $R/gpu_tests_first.log 2>&1
