# one machine start, one H100 (the dispatch/ of fa8911b unpacked in /tmp/base for "before")
for dt in bfloat16 float32; do
S=8x4096,256x65536,64x262144; [ $dt = float32 ] && S=256x65536,64x262144
PYTHONPATH=/tmp/base:$PYTHONPATH timeout 110 python3 benchmarks/bench_launch.py --ops rms_norm,layer_norm --shapes $S --dtype $dt --grad --compiled-pick --no-compile --rounds 3 --out before_$dt
C=--no-compile; [ $dt = float32 ] && C=; timeout 130 python3 benchmarks/bench_launch.py --ops rms_norm,layer_norm --shapes $S --dtype $dt --grad --compiled-pick $C --rounds 3 --out after_$dt
done
