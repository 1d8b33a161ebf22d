set -x
timeout 450 python3 benchmarks/sweep_smem_norm_backward.py --out $R/sweep --timer graph --dtypes bfloat16 --shapes 16384x1024,4096x4096,1024x16384,8192x2048,2048x8192 --time-limit 250 > $R/sweep.log 2>&1
grep -v "TileLang begins\|TileLang completes\|Warning" $R/sweep.log | tail -40
ls $R/sweep
