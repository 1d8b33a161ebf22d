set -x
timeout 150 python3 .gpu/ind2.py $R/inductor_configs.txt > $R/ind2.log 2>&1; tail -3 $R/ind2.log; grep -A3 "=====" $R/inductor_configs.txt | grep -E "=====|tuner" | head -40
cd benchmarks
timeout 150 python3 sweep_norm_configs.py --quick --ops rms_norm,layer_norm --ns 8192,16384 --dtypes float32,bfloat16 --time-limit 130 --out $R/sweep_wb > $R/sweep_wb.log 2>&1
grep -E "^\[ " $R/sweep_wb.log | grep "/8 " | tail -8
grep -E "wb_each" $R/sweep_wb.log | head -40
