set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $R/gpu.txt 2>&1
cp .gpu/old/smem_norm_backward.py backends/dispatch_tilelang/_old_smem_norm_backward.py
timeout 200 python3 .gpu/kt.py > $R/kt.log 2>&1; grep -v TileLang $R/kt.log | cut -c1-250
for c in "rms_norm 4096 4096" "layer_norm 4096 4096" "layer_norm 256 65536"; do
  timeout 60 ncu --kernel-name regex:main --launch-skip 2 --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats python3 .gpu/kt.py --one $c > "$R/ncu_$(echo $c | tr ' ' _).txt" 2>&1
  grep -E "Duration|Throughput|Registers Per|Achieved Occupancy|Stall|Warp Cycles Per Issued|Theoretical Occ|stalled|spends" "$R/ncu_$(echo $c | tr ' ' _).txt" | head -30
done
rm backends/dispatch_tilelang/_old_smem_norm_backward.py
timeout 230 python3 -m pytest -q -x tests/test_gpu_tilelang_smem_norm_backward.py > $R/tests_bwd.log 2>&1; tail -3 $R/tests_bwd.log
