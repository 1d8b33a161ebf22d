# The runs behind README.md, on one H100 (OUT: a results folder). "before" is dispatch_triton as of
# commit 16c4607, put ahead of the installed one on PYTHONPATH (its launch.py path is printed first).
S=1024x65536,256x262144,512x131072,2048x32768,64x65536,32x151936,8x128256,4096x16384
python3 -m pytest -q tests/test_triton_kernels.py tests/test_gpu_backends.py tests/test_gpu_launch.py -k "logsumexp or chunks or lse"
python3 benchmarks/sweep_lse_forms.py --out $OUT/after --paths --forms "" --backends triton --shapes $S
mkdir -p /tmp/base && git archive 16c4607 backends/dispatch_triton | tar -x -C /tmp/base
PYTHONPATH=/tmp/base/backends:$PYTHONPATH python3 benchmarks/sweep_lse_forms.py --out $OUT/before --paths --forms "" \
  --backends triton --shapes $S
cat > /tmp/ncu1.py <<'PY'
import torch, dispatch
x = (torch.randn(1024, 65536, device="cuda") * 3).to(torch.bfloat16)
dispatch.logsumexp(x, -1, backend="triton"); torch.cuda.synchronize()
PY
ncu --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section LaunchStats \
  --section Occupancy --section SchedulerStats --section InstructionStats -k regex:"_softmax_kernel" python3 /tmp/ncu1.py
# forms/: the forms of one chunk's (max, sum), and ncu of the kernel before (forms/ncu_forms.py)
python3 benchmarks/sweep_lse_forms.py --out $OUT/forms --shapes 1024x65536,256x262144,4096x16384
python3 benchmarks/sweep_lse_forms.py --out $OUT/forms --timer graph --shapes 64x65536,512x16384
python3 benchmarks/sweep_lse_forms.py --out $OUT/forms --dtypes float32 --forms read,twopass,group \
  --configs 4096x4x16,8192x4x8,2048x2x16 --shapes 1024x65536
