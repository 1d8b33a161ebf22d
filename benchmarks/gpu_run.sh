#!/usr/bin/env bash
# One device run: GPU tests, the softmax-family sweep, and the warm-cache check (results in $OUT).
# Usage on the device machine, from the repo root, after unpacking TileLang (shared/gpu/README.md):
#   bash benchmarks/gpu_run.sh [TEST_SECONDS] [BENCH_SECONDS]
set -u
out=${OUT:-benchmarks/results}
export DISPATCH_CACHE_DIR=${DISPATCH_CACHE_DIR:-/tmp/dispatch-cache}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.total --format=csv > "$out/gpu.txt" 2>&1
timeout "${1:-170}" python3 -m pytest -v -p no:cacheprovider tests/test_gpu_backends.py > "$out/pytest_gpu.log" 2>&1
echo "pytest exit $?" >> "$out/pytest_gpu.log"
timeout "${2:-300}" python3 benchmarks/bench_softmax.py --compile "" \
  --pairs softmax:bfloat16,softmax:float32,log_softmax:bfloat16,logsumexp:bfloat16,softmax:float16 \
  --out "$out" > "$out/bench.log" 2>&1
echo "bench exit $?" >> "$out/bench.log"
timeout 60 python3 benchmarks/warm_cache_check.py --shapes 16384x4096,256x262144 --ops softmax \
  > "$out/warm_cache.json" 2>&1
echo "warm-cache exit $?" >> "$out/warm_cache.json"
