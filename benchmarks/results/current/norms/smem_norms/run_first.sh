set -x
timeout 330 python3 benchmarks/sweep_smem_norms.py --out $R/smem_norms --time-limit 200 > $R/smem_norms.log 2>&1
grep -E "FAIL|built|limit" $R/smem_norms.log | head -20
grep -E "^\|" $R/smem_norms.log | grep -E "default|copy|torch" | head -80
pack
echo "tests/test_gpu_tilelang_smem_norms.py" > /tmp/f
python3 -m pytest --collect-only -q tests/test_gpu_tilelang_smem_norms.py 2>/dev/null | grep '::' > /tmp/ids
echo "tests/test_gpu_tilelang_smem_cols.py::test_a_view_that_starts_mid_vector" >> /tmp/ids
python3 -m pytest --collect-only -q tests/test_log_softmax_rounding.py 2>/dev/null | grep '::' >> /tmp/ids
wc -l /tmp/ids
cd /tmp && split -n r/8 /tmp/ids shard_ && cd -
for f in /tmp/shard_*; do
  (DISPATCH_NATIVE=off timeout 200 xargs -a $f -d '\n' python3 -m pytest -q -rf -p no:cacheprovider > $R/t_$(basename $f).log 2>&1) &
done
wait
for f in $R/t_shard_*.log; do echo "== $f"; grep -E "passed|failed|error" $f | tail -1; grep -E "^FAILED|^ERROR" $f | head -20; done
pack
