cp backends/dispatch_triton/norm_kernels.py /tmp/nk_keep.py; cd benchmarks
for v in base shift0 nofall plain shift0_plain onered; do
  cp /tmp/nk_keep.py ../backends/dispatch_triton/norm_kernels.py
  [ $v != base ] && (cd .. && python3 .gpu/patch_ln.py $v)
  timeout 100 python3 sweep_norm_configs.py --quick --only "coop bn2048 w4 wb_each regs128" --ops layer_norm --dtypes bfloat16 \
    --ns 65536,262144 --time-limit 80 --out $R/v_$v > $R/v_$v.log 2>&1
  echo "== $v"; grep -E "^\| (coop bn2048|same-size|.*default)" $R/v_$v/norm_configs.md | cut -c1-60
done
cp /tmp/nk_keep.py ../backends/dispatch_triton/norm_kernels.py
timeout 150 python3 sweep_norm_configs.py --quick --only "coop bn2048 w4" --ops rms_norm --dtypes bfloat16,float16 \
    --ns 131072,262144 --time-limit 120 --out $R/rms_coop > $R/rms_coop.log 2>&1
grep -E "^\| (coop bn2048|same-size|.*default)" $R/rms_coop/norm_configs.md | cut -c1-60
