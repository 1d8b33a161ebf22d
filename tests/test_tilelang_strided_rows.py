"""Rows one stride apart (a slice ``x[:, :N]`` of wider rows) through the TileLang row kernels on CUDA,
checked without a GPU.

The framework's ``rows_stride`` against the true addresses of small layouts; the backend's routing
of CUDA calls (strided rows to the row kernels, with the stride as a build key; what the column
kernels still refuse, with the reason; the C target unchanged); the compiled kernel's and the call
path's handling of strided rows (the view the executable checks, a misaligned start copied into
rows of the same stride, the user's tensor untouched); dispatch's sweep rather than TileLang's
autotuner for them; and the CUDA programs lowered for sm_90: the row stride in the input's address
computation, the dense program unchanged by the parameter. The runs on a GPU are in
tests/test_gpu_layouts.py.
"""

from __future__ import annotations

import itertools
import shutil

import attrs
import pytest
import torch

import dispatch
from backends_needed import require_backend
from dispatch.backend import rows_stride, spec_of

pytest.importorskip("tilelang")
import dispatch_tilelang as TL  # noqa: E402
from dispatch_tilelang import build as B, direct, strided  # noqa: E402


def _cuda_spec(op, x, *args):
    """The call spec of ``op`` on ``x`` as if ``x`` were on a CUDA device."""
    spec = spec_of(op, x, *args)
    return attrs.evolve(spec, tensors=[attrs.evolve(t, device=torch.device("cuda", 0)) for t in spec.tensors])


# -- the framework's helper ------------------------------------------------------------------------

def _rows_at(shape, stride, row_stride) -> bool:
    """Whether row ``r`` (row-major over the leading dims) really starts at ``r * row_stride``."""
    index = itertools.product(*[range(n) for n in shape[:-1]])
    return all(sum(i * s for i, s in zip(idx, stride)) == r * row_stride for r, idx in enumerate(index))


def test_rows_stride_of_common_layouts():
    base = torch.empty(16, 64)
    assert rows_stride(base.shape, base.stride()) == 64
    assert rows_stride(base[:, :40].shape, base[:, :40].stride()) == 64  # a slice of wider rows
    cube = torch.empty(4, 8, 64)[:, :, :40]
    assert rows_stride(cube.shape, cube.stride()) == 64  # leading dims collapse to one stride
    assert rows_stride(torch.empty(4, 8, 64)[:, :6, :40].shape, (8 * 64, 64, 1)) is None  # they don't
    permuted = torch.empty(4, 8, 64).permute(1, 0, 2)
    assert rows_stride(permuted.shape, permuted.stride()) is None
    assert rows_stride((40,), (1,)) == 40  # one row: its length
    assert rows_stride((1, 40), (99, 1)) == 99  # one row: any stride serves, the one given is kept
    assert rows_stride((4, 1, 8), (16, 99, 1)) == 16  # a size-1 dim's stride addresses nothing
    assert rows_stride((2, 1, 3, 4), (8, 8, 16, 1)) is None  # rows at 0, 16, 32, 8, 24, 40: no one stride


def test_rows_stride_is_the_true_row_stride_wherever_it_gives_one():
    sizes, strides = (1, 2, 3), (0, 1, 3, 4, 8, 12, 24)
    for nd in (2, 3):
        for shape in itertools.product(sizes, repeat=nd):
            for stride in itertools.product(strides, repeat=nd):
                s = rows_stride(shape + (4,), stride + (1,))
                rows = 1
                for n in shape:
                    rows *= n
                if s is not None and rows > 1:
                    assert _rows_at(shape + (4,), stride + (1,), s), (shape, stride, s)


def test_triton_reads_rows_through_the_framework_helper():
    require_backend("triton")
    import dispatch_triton

    device = "cuda" if torch.cuda.is_available() else "cpu"  # on the CPU: Triton's interpreter
    x = torch.randn(4, 99, 8, device=device).as_strided((4, 1, 8), (16, 99, 1))
    spec = spec_of("softmax", x, -1)
    assert dispatch_triton.rows_view_stride(spec) == rows_stride(spec.shape, spec.stride) == 16
    torch.testing.assert_close(dispatch.softmax(x, -1, backend="triton"), torch.softmax(x, -1))


# -- routing on CUDA -------------------------------------------------------------------------------

SERVED = [  # (name, view of a (64, 4096) float32 buffer or of its 3-D reshape, row stride)
    ("slice_4000", lambda t: t[:, :4000], 4096),
    ("slice_1000", lambda t: t[:, :1000], 4096),
    ("misaligned_start", lambda t: t[:, 1:], 4096),
    ("three_d", lambda t: t.view(8, 8, 4096)[:, :, :1000], 4096),
    ("every_other_row", lambda t: t[::2], 8192),
]


@pytest.mark.parametrize("name,view,stride", SERVED, ids=[c[0] for c in SERVED])
def test_strided_rows_go_to_the_row_kernels_on_cuda_with_their_stride(name, view, stride):
    x = view(torch.empty(64, 4096))
    for op in ("softmax", "log_softmax", "logsumexp"):
        spec = _cuda_spec(op, x, -1)
        assert TL._rows(spec) and TL._row_stride(spec) == stride
        assert not TL._rows(spec_of(op, x, -1))  # the C target: the column kernels, as before
    dense = _cuda_spec("softmax", torch.empty(64, 4000), -1)
    assert TL._rows(dense) and TL._row_stride(dense) == 0
    one_row = _cuda_spec("softmax", torch.empty(64, 4096)[:1, :4000], -1)
    assert TL._rows(one_row) and TL._row_stride(one_row) == 0


REFUSED = [  # (name, view, dim): a unit-stride reduced dim whose rows are not one stride apart
    ("permuted_leading", lambda t: t.view(8, 8, 4096).permute(1, 0, 2), -1),
    ("transposed_over_unit_dim", lambda t: t.t(), 0),
    ("broadcast_rows", lambda t: t[0].expand(64, 4096), -1),
]


@pytest.mark.parametrize("name,view,dim", REFUSED, ids=[c[0] for c in REFUSED])
def test_what_the_cuda_column_kernels_still_refuse_says_why(name, view, dim):
    x = view(torch.empty(64, 4096))
    spec = _cuda_spec("softmax", x, dim)
    assert not TL._rows(spec)
    verdict = strided.check(spec, "cuda")
    assert not verdict.ok and "rows are not one stride apart" in verdict.reason
    assert "row kernels take the last dim of rows one stride apart" in verdict.reason


def test_strided_rows_tune_through_dispatchs_sweep(monkeypatch):
    """TileLang's autotuner compiles a packed ABI that refuses a strided input: no native tune."""
    monkeypatch.setattr(TL, "NATIVE_AUTOTUNE", True)
    x = torch.empty(64, 4096)[:, :4000]
    spec = _cuda_spec("softmax", x, -1)
    space = TL.dispatch_tune_space("softmax", spec)
    assert TL.dispatch_native_tune("softmax", spec, space, (x,), dispatch.backend.TuneSettings()) is None


# -- the compiled kernel and its call path ---------------------------------------------------------

def test_a_strided_build_has_a_key_of_its_own_and_only_on_cuda():
    cfg = {"block_m": 1, "threads": 256, "tile_n": 0, "cluster": 1}
    dense = B._build_key("softmax", 4000, "float32", "float32", cfg, "cuda")
    assert dense != B._build_key("softmax", 4000, "float32", "float32", cfg, "cuda", 4096)
    with pytest.raises(ValueError, match="dense rows only"):
        B.jit_program("softmax", 40, "float32", "float32", "c", {"tile_n": 0}, row_stride=64)
    with pytest.raises(ValueError, match="at least n_cols"):
        B.jit_program("softmax", 40, "float32", "float32", "cuda", {"tile_n": 0, "cluster": 1}, row_stride=32)


def test_vectors_narrow_until_they_divide_the_row_stride():
    from dispatch_tilelang.cuda_kernels import check_launch, vector_width

    assert vector_width(4000, "bfloat16") == 8 and vector_width(4000, "bfloat16", 4100) == 4
    assert vector_width(4000, "float32", 4096) == 4 and vector_width(4095, "float32", 4096) == 1
    for n, stride in ((4000, 4100), (1000, 1001), (65536, 65538)):  # a dense config serves every stride
        for cfg in TL._space("softmax", _cuda_spec("softmax", torch.empty(64, n), -1))[0]:
            args = (n, "bfloat16", cfg["tile_n"], cfg["cluster"], cfg["block_m"], cfg["threads"])
            assert check_launch(*args) is None and check_launch(*args, stride) is None


def test_the_compiled_kernel_takes_rows_of_its_stride_only():
    kernel = B.CompiledKernel("softmax", 8, "float32", "float32", {}, "cuda", lambda x: torch.softmax(x, -1), 16)
    x = torch.randn(4, 16)[:, :8]
    torch.testing.assert_close(kernel(x), torch.softmax(x, -1))
    with pytest.raises(ValueError, match=r"strides \(16, 1\)"):
        kernel(x.contiguous())


class _StridedExecutable:
    """A tvm-ffi executable of softmax over rows ``stride`` apart (caller ABI), checking what the
    real one checks: the strides, and a 16-byte aligned start (the kernels' vector loads)."""

    def __init__(self, stride):
        self.stride, self.calls = stride, []

    def __call__(self, x, out):
        assert x.stride() == (self.stride, 1) and x.data_ptr() % 16 == 0, (x.stride(), x.data_ptr() % 16)
        self.calls.append(x.data_ptr())
        out.copy_(torch.softmax(x, -1))


def _strided_path(monkeypatch, m, n, stride, out_shape):
    monkeypatch.setattr(direct, "ARM_DEVICES", ("cpu",))
    monkeypatch.setattr(direct, "_capturing", lambda: False)
    exe = _StridedExecutable(stride)
    adapter = type("TVMFFIKernelAdapter", (), {})()
    adapter.result_idx, adapter.params, adapter._ffi_callee_allocated_output_abi = [1], ["x", "y"], False
    adapter._get_executable = lambda: exe
    jit = type("JITKernel", (), {"adapter": adapter, "__call__": lambda self, x: torch.softmax(x, -1)})()
    compiled = B.CompiledKernel("softmax", n, "float32", "float32", {}, "cuda", jit, stride)
    return direct.call_path(compiled, m, n, out_shape, len(out_shape) == 2), exe


@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "misaligned"])
def test_the_call_path_hands_rows_over_in_place_or_as_an_aligned_copy(monkeypatch, offset):
    run, exe = _strided_path(monkeypatch, 6, 40, 64, (6, 40))
    base = torch.randn(6, 64)
    x = base[:, offset:offset + 40]
    before = base.clone()
    for _ in range(3):  # the adapter's call, then the executable's once checked
        got = run(x)
        torch.testing.assert_close(got, torch.softmax(x, -1))
        assert got.is_contiguous() and got.stride() == torch.softmax(x, -1).stride()
    assert run.path.state == "direct" and len(exe.calls) == 3
    assert (exe.calls[-1] == x.data_ptr()) == (offset == 0)  # in place unless misaligned
    assert torch.equal(base, before)


def test_the_call_path_collapses_leading_dims_to_the_rows(monkeypatch):
    run, exe = _strided_path(monkeypatch, 12, 40, 64, (3, 4, 40))
    x = torch.randn(3, 4, 64)[:, :, :40]
    for _ in range(2):
        got = run(x)
        assert got.shape == (3, 4, 40) and got.is_contiguous()
        torch.testing.assert_close(got, torch.softmax(x, -1))
    assert exe.calls[-1] == x.data_ptr()


# -- the CUDA programs, lowered for sm_90 ----------------------------------------------------------

def _lowered(op, n, dtype, row_stride=None, cfg=None):
    from dispatch_tilelang import cuda_kernels

    cfg = cfg or {"block_m": 1, "threads": 256}
    extra = () if row_stride is None else (row_stride,)
    return cuda_kernels.program(op, n, dtype, dtype, 0, 1, "sm_90", *extra)(**cfg).get_kernel_source()


def _x_loads(src: str) -> list[str]:
    return [line for line in src.splitlines() if "(x + " in line or "x[" in line]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_cuda_programs_index_rows_by_the_stride_and_dense_ones_are_unchanged():
    dense = _lowered("log_softmax", 4000, "float32")
    assert dense == _lowered("log_softmax", 4000, "float32", 0)  # the parameter at 0: the dense program
    assert any("(int64_t)4000)" in line for line in _x_loads(dense))
    sliced = _lowered("log_softmax", 4000, "float32", 4096)
    loads = _x_loads(sliced)
    assert loads and all("(int64_t)4096)" in line for line in loads) and "float4" in loads[0]
    narrowed = _lowered("softmax", 4000, "bfloat16", 4100)  # 8 bf16 don't divide 4100: 4 at a time
    assert any("(int64_t)4100)" in line and "uint2" in line for line in _x_loads(narrowed))
