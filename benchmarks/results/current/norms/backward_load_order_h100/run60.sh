nvidia-smi --query-gpu=name --format=csv > $R/gpu.txt; cat $R/gpu.txt; git log --oneline | head -1 > $R/commit.txt
for dt in bfloat16 float32; do
timeout 130 python3 benchmarks/bench_launch.py --grad --device-timing --ops rms_norm,layer_norm --shapes 1536x10240,1024x16384,256x65536,64x262144 --dtype $dt --rounds 5 --out $R/launch_grad_$dt > $R/launch_grad_$dt.log 2>&1; echo "launch $dt rc $?"; grep "^| [a-z]" $R/launch_grad_$dt/launch.md
done
tar czf $OUT/r.tgz -C /tmp r60
