python3 -m pytest --collect-only -q tests/test_gpu_backends.py tests/test_gpu_launch.py tests/test_gpu_seeds.py 2>/dev/null | grep '::' > /tmp/ids
wc -l /tmp/ids > $R/gpu_tests_count.txt
(cd /tmp && split -n r/12 /tmp/ids shard_)
for f in /tmp/shard_*; do
  (DISPATCH_NATIVE=off timeout 190 xargs -a $f -d '\n' python3 -m pytest -q -rf -p no:cacheprovider > $R/t_$(basename $f).log 2>&1) &
done
wait
cat $R/t_shard_*.log | grep -v "ThreadSync" > $R/gpu_tests.log; rm $R/t_shard_*.log
