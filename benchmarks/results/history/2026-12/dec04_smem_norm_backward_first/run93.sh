export DISPATCH_CACHE_DIR=/tmp/tunecache
for spec in "layer_norm --shape 256x65536 --backends tilelang,triton" "softmax --shape 64x262144 --backends tilelang,triton" "softmax --shape 32x1024x64x64 --dim 1 --backends tilelang,triton"; do
  name=$(echo $spec | tr ' ,' '__' | tr -d '-')
  timeout 95 python3 -m dispatch tune $spec --dtype bfloat16 > $R/tune_$name.txt 2>&1
  echo "== $spec: rc $?"; grep -E "tilelang|choice|serializ|Error" $R/tune_$name.txt | grep -v "step/s\|\?step" | cut -c1-300 | head -8
done
