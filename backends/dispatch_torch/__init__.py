"""The torch reference backend: serves every call of every declared op on every device; the oracle.

Its kernels are the ops' declared references (torch's own functions).
"""

from __future__ import annotations

import torch

from dispatch.backend import BackendInfo, CallSpec, Verdict, hookimpl, reference_kernel

NAME = "torch"


@hookimpl
def dispatch_backend_info() -> BackendInfo:
    return BackendInfo(name=NAME, version=torch.__version__, ops=(),  # the reference serves every declared op
                       priority={"cpu": 100, "cuda": 0}, versions={"torch": torch.__version__},
                       # H200: 7.1-11.0 us a dispatched call back to back at decode shapes
                       # (benchmarks/results/current/launch/launch_decode.md; 12.5 below was measured
                       # on a slower host start, as the other backends' figures); 2500 GB/s is its best
                       # bandwidth (an upper bound, so a GPU kernel wins only when clearly ahead).
                       # torch.logsumexp runs several kernels: 83-93 us a call at decode shapes,
                       # 380-550 GB/s at bandwidth shapes (the softmax sweep's logsumexp rows).
                       # rms_norm / layer_norm at decode shapes (1-32 rows of 4096, 1x8192, bf16 and
                       # fp32): a dispatched call 13-16% / 14-29% dearer than dispatch[triton]'s
                       # (benchmarks/results/current/launch/launch_norms.md). Their training step
                       # (forward and autograd.grad), bf16: 120-175 us of host time a step, and
                       # 710-900 GB/s of forward bytes in device time up to rows of 16384
                       # (launch_norms_grad.md and launch_norms_grad_large.md there). torch's norm kernels
                       # give a row to one block, so however few the rows, a call takes a row's time: bf16
                       # forward 413 us at 64x262144 (1.6 ns per element of the row), forward and backward
                       # 929 (3.5 ns), where bandwidth alone says 27 and 79; at 256x65536, 113 and 283 us
                       # (benchmarks/results/current/norms/norms_sweep.md): the third figures, a little
                       # under the one-row times. softmax/log_softmax over few rows longer than 16K (bf16)
                       # take a row's time too: softmax 37.8 us a call at 32x151936, 67 at 1x262144,
                       # log_softmax 24.9 and 45.6, where TileLang and Triton take 11-19
                       # (benchmarks/results/current/launch/launch_few_long_rows.md, layouts/few_long_rows_cards.md);
                       # per element of the row, softmax 0.22-0.26 ns, log_softmax 0.14-0.19 (H100 and H200), and
                       # over many long rows 1400-1900 GB/s (softmax) and 1440-2330 (log_softmax): the races in
                       # dispatch/tables/nvidia-h100-80gb-hbm3*.json and nvidia-h200-smem.json
                       # (benchmarks/results/current/rows_kernels/few_long_h100/)
                       # Over a dim that is not the last unit-stride one, bf16: softmax/log_softmax
                       # 16-17 GB/s over dim 0 of 4096x4096, 315-595 over dim 1 of (B, C, H, W), 377-393
                       # on a transposed view; logsumexp 92-382 (benchmarks/results/current/layouts/layouts.md),
                       # where TileLang's column kernels run 1674-2650 (tilelang_dim.md there)
                       # softmax/log_softmax of bf16 with a float32 result (dtype=, or torch.autocast): a
                       # cast kernel, then the float32 op (about 14 bytes moved an element, not 6); under
                       # autocast at 32x4096 on an H100, 26.6 us a call against dispatch[triton]'s 16.7
                       # (benchmarks/results/current/autocast/README.md). fp16 has one fused kernel: at most
                       # a launch's difference
                       costs={"cuda": (12.5, 2500.0), "cuda:logsumexp": (80.0, 550.0),
                              "cuda:softmax:cast": (22.0, 1070.0), "cuda:log_softmax:cast": (22.0, 1070.0),
                              "cuda:strided": (12.5, 400.0), "cuda:logsumexp:strided": (80.0, 300.0),
                              "cuda:softmax:long": (12.5, 1900.0, 0.22), "cuda:log_softmax:long": (12.5, 2100.0, 0.14),
                              "cuda:rms_norm": (15.0, 2500.0, 1.5), "cuda:layer_norm": (16.5, 2500.0, 1.5),
                              "cuda:rms_norm:grad": (140.0, 850.0, 3.0), "cuda:layer_norm:grad": (140.0, 780.0, 3.0)},
                       description="torch's own ops (the reference)", reference=True)


@hookimpl
def dispatch_check(op: str, spec: CallSpec) -> Verdict:
    return Verdict.yes("the reference serves every call")


@hookimpl
def dispatch_kernel(op: str, spec: CallSpec, config) -> object:
    return reference_kernel(spec)
