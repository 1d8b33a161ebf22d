#!/usr/bin/env bash
# One device run: the whole test-suite (sharded), the softmax-family sweep, the warm-cache check,
# cold-cache tune times and decode-shape call costs (results in $OUT).
# Usage on the device machine, from the repo root, after unpacking TileLang (shared/gpu/README.md):
#   [RESUME_FROM=DIR] bash benchmarks/gpu_run.sh [TEST_SECONDS] [BENCH_SECONDS] [PAIRS]
set -u
out=${OUT:-benchmarks/results}
mkdir -p "$out"
export DISPATCH_CACHE_DIR=${DISPATCH_CACHE_DIR:-/tmp/dispatch-cache}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.total --format=csv > "$out/gpu.txt" 2>&1
timeout "${1:-330}" python3 benchmarks/run_tests_sharded.py --shards 10 --timeout "$((${1:-330} - 20))" \
  --out "$out/tests" tests/ > "$out/pytest.log" 2>&1
echo "tests exit $?" >> "$out/pytest.log"
# the sweep, one shard per GPU (merged at the end); RESUME_FROM=DIR goes on with the sweep in
# DIR (its rows are kept)
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l); [ "$ngpu" -ge 1 ] || ngpu=1
resume=""
for ((i = 0; i < ngpu; i++)); do
  mkdir -p "$out/sweep$i"
  if [ -n "${RESUME_FROM:-}" ]; then cp "$RESUME_FROM/softmax_sweep.json" "$out/sweep$i/" && resume="--resume"; fi
  (CUDA_VISIBLE_DEVICES=$i DISPATCH_CACHE_DIR=$DISPATCH_CACHE_DIR/gpu$i timeout "${2:-450}" \
    python3 benchmarks/bench_softmax.py --warm $((12 / ngpu)) $resume --shard "$i/$ngpu" \
    --pairs "${3:-softmax:bfloat16,softmax:float32,softmax:float16,log_softmax:bfloat16,log_softmax:float32,log_softmax:float16,logsumexp:bfloat16,logsumexp:float32,logsumexp:float16}" \
    --out "$out/sweep$i" > "$out/sweep$i/bench.log" 2>&1; echo "bench exit $?" >> "$out/sweep$i/bench.log") &
done
wait
python3 benchmarks/bench_softmax.py --merge "$(ls "$out"/sweep*/softmax_sweep.json | paste -sd,)" --out "$out" \
  > "$out/bench.log" 2>&1
# warm cache: a first process tunes two calls, a second one (what is kept) must measure nothing
export DISPATCH_CACHE_DIR=$DISPATCH_CACHE_DIR/warm
timeout 120 python3 benchmarks/warm_cache_check.py --shapes 16384x4096,256x262144 --ops softmax > /dev/null 2>&1
timeout 60 python3 benchmarks/warm_cache_check.py --shapes 16384x4096,256x262144 --ops softmax \
  > "$out/warm_cache.json" 2>&1
echo "warm-cache exit $?" >> "$out/warm_cache.json"
timeout 150 python3 benchmarks/bench_tune_time.py --json "$out/tune_time.jsonl" \
  --cases softmax:bfloat16:262144x256,softmax:bfloat16:16384x4096,softmax:bfloat16:1024x65536 > /dev/null 2>&1
timeout 120 python3 benchmarks/bench_launch.py --out "$out/launch" > "$out/launch.log" 2>&1
