set -x
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv
F="tests/test_gpu_tilelang_smem_cols.py tests/test_gpu_tilelang_smem.py tests/test_log_softmax_rounding.py"
python3 -m pytest --collect-only -q $F 2>/dev/null | grep '::' > /tmp/ids_a
python3 -m pytest --collect-only -q -k tilelang tests/test_gpu_layouts.py tests/test_gpu_launch.py 2>/dev/null | grep '::' > /tmp/ids_b
cat /tmp/ids_a /tmp/ids_b > /tmp/ids; wc -l /tmp/ids_a /tmp/ids_b
cd /tmp && split -n r/8 /tmp/ids shard_ && cd -
for f in /tmp/shard_*; do
  (DISPATCH_NATIVE=off timeout 420 xargs -a $f -d '\n' python3 -m pytest -q -rf -p no:cacheprovider > $R/$(basename $f).log 2>&1) &
done
wait
for f in $R/shard_*.log; do echo "== $f"; grep -E "passed|failed|error" $f | tail -3; grep -E "^FAILED|^ERROR" $f | head -20; done
pack
