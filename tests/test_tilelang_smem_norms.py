"""TileLang's norms with each row's chunks in shared memory (``smem_norms``, config ``smem: 1``): which
calls they serve by default and which they leave to the other families, a config chosen on one
row of a bucket serving every row of it, the card figures their verdict names (and so which
backend dispatch picks), and their sm_90 build.

The kernels run on a GPU only (``tests/test_gpu_tilelang_smem_norms.py``).
"""

from __future__ import annotations

import attrs
import pytest
import torch

pytest.importorskip("tilelang")

from dispatch.backend import spec_of  # noqa: E402
from dispatch_tilelang import norms as NM  # noqa: E402


def cuda_spec(op, x, *args):
    spec = spec_of(op, x, *args)
    return attrs.evolve(spec, tensors=[attrs.evolve(t, device=torch.device("cuda", 0)) for t in spec.tensors])


def meta(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="meta")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("m,n", [(4096, 4096), (1024, 16384), (256, 65536), (32, 151936), (64, 262144), (8, 50264)])
def test_dense_rows_of_4k_and_more_default_to_shared_memory(dtype, m, n):
    cfg = NM.default_config(m, n, "cuda", dtype)
    assert cfg.get("smem") == 1, cfg
    assert NM.smem_refusal(n, dtype, 0, cfg) is None
    assert cfg["cluster"] * cfg["tile_n"] >= n > (cfg["cluster"] - 1) * cfg["tile_n"]  # no CTA without columns
    assert cfg == NM.config_space(m, n, "cuda", dtype)[0]


def test_what_the_shared_memory_family_leaves_to_the_others(monkeypatch):
    from dispatch_tilelang import configs

    def family(m, n, dtype="bfloat16", stride=0):
        return NM.default_config(m, n, "cuda", dtype, stride).get("smem", 0)

    assert not family(64, 2048)              # short rows: registers
    assert not family(8, 50257)              # not a whole number of 16-byte vectors
    assert not family(64, 8192, stride=8200)  # rows of a wider buffer: read in place by the others
    assert not family(2, 1 << 20, "float32")  # 4 MB rows: past 16 chunks of 64 KB
    assert all(not c.get("smem") for c in NM.config_space(64, 8192, "cuda", "bfloat16", 8200))
    assert NM.smem_refusal(8192, "bfloat16", 8200) and "dense rows only" in NM.smem_refusal(8192, "bfloat16", 8200)
    assert "16-byte vectors" in NM.smem_refusal(50257, "bfloat16", 0)
    assert all("smem" not in c for c in NM.config_space(64, 65536, "c", "float32"))
    monkeypatch.setattr(configs, "cuda_supports_clusters", lambda: False)  # a GPU older than sm_90
    assert not family(256, 65536) and "sm_90" in NM.smem_refusal(65536, "bfloat16", 0)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("chosen_at", [65536, 262144])
def test_a_config_chosen_on_one_row_of_a_bucket_serves_every_row_of_it(dtype, chosen_at):
    """A tuned or raced decision is kept for the bucket (N up to the next power of two): refitted,
    its chunk is the cluster's share of each row, the cluster halved where that share, rounded up
    to a vector a thread, would leave a CTA without columns (8 chunks of 5120 for a row of 32776:
    the last CTA would start past the row, and the kernel refuses that)."""
    vec = 16 // (4 if dtype == "float32" else 2)
    cfg = NM.default_config(64, chosen_at, "cuda", dtype)
    assert NM.fit(chosen_at, dtype, cfg) == cfg
    for n in range(chosen_at // 2 + vec, chosen_at + 1, 1016 * vec):
        fitted = NM.fit(n, dtype, cfg)
        assert NM.smem_refusal(n, dtype, 0, fitted) is None, (n, fitted)
        assert fitted["threads"] == cfg["threads"] and fitted["cluster"] <= cfg["cluster"]
    other = {"block_m": 1, "threads": 512, "tile_n": 8192}
    assert NM.fit(100000, dtype, other) == other  # the other families keep their configs


def _servers(monkeypatch):
    from dispatch import _plugins

    from dispatch_tilelang import availability

    monkeypatch.setattr(availability, "available", lambda target: (True, ""))  # the verdict a GPU gets
    servers = [b for b in _plugins.registry().backends.values() if b.name in ("triton", "tilelang", "torch")]
    if len(servers) < 3:
        pytest.skip("needs torch, Triton and TileLang loaded")
    return servers


@pytest.mark.parametrize("op,x,grad,first", [
    ("layer_norm", meta(8, 64, 131072), False, "tilelang"),  # 31.3 against 39.4 (128 x 131072)
    ("layer_norm", meta(64, 262144), False, "tilelang"),   # 31.3 against 34.7 (graph replay, Dec 5)
    # few rows, where a call's host time counts: H100, Dec 6, us a back-to-back call / graph replay
    ("layer_norm", meta(64, 65536), False, "tilelang"),    # 15.6 / 8.7 against 18.8 / 13.2
    ("layer_norm", meta(32, 262144), False, "tilelang"),   # 16.0 / 16.3 against 19.3 / 21.2
    # many rows of up to 64K: Triton's chunked walk (Dec 5), graph replay us
    ("layer_norm", meta(256, 65536), False, "triton"),     # 23.7 against TileLang's 26.1
    ("layer_norm", meta(512, 32768), False, "triton"),     # 24.4 against 25.6
    ("layer_norm", meta(256, 65536), True, "triton"),      # under autograd: Triton's backward
    ("layer_norm", meta(4, 262144), False, "triton"),      # 64 CTAs: 10.5 against 8.7
    ("layer_norm", meta(32, 151936), False, "triton"),     # 256 CTAs: 16.9 against 15.9
    ("layer_norm", meta(1024, 16384), False, "triton"),    # 25.6 against 25.0
    ("layer_norm", meta(256, 65536, dtype=torch.float32), False, "triton"),  # 53.7 against 47.8
    ("rms_norm", meta(256, 65536), False, "triton"),       # 27.9 against 25.6
])
def test_the_cards_pick_shared_memory_where_it_was_measured_faster(monkeypatch, op, x, grad, first):
    from dispatch._select import by_estimated_cost

    import dispatch_tilelang

    servers = _servers(monkeypatch)
    n = x.shape[-1]
    w = torch.empty(n, dtype=x.dtype, device="meta")
    args = ((n,), w.requires_grad_(grad)) + ((w,) if op == "layer_norm" else ())
    spec = cuda_spec(op, x, *args)
    verdict = dispatch_tilelang.dispatch_check(op, spec)
    assert verdict.ok and "shared memory" in verdict.reason, verdict
    ordered, _ = by_estimated_cost(servers, spec, cards={"tilelang": verdict.card})
    assert ordered[0].name == first, (op, x.shape, verdict, spec.requires_grad)


@pytest.mark.parametrize("x", [meta(256, 65536), meta(512, 32768)])
def test_rows_that_triton_walks_rank_tilelang_second_not_last(monkeypatch, x):
    # Triton's chunked walk leads there; without Triton (not installed, excluded, quarantined) the
    # shared-memory rows still rank above torch's op (a quarter of its time on the H200)
    from dispatch._select import by_estimated_cost

    import dispatch_tilelang

    servers = _servers(monkeypatch)
    n = x.shape[-1]
    w = torch.empty(n, dtype=x.dtype, device="meta")
    spec = cuda_spec("layer_norm", x, (n,), w, w)
    verdict = dispatch_tilelang.dispatch_check("layer_norm", spec)
    assert verdict.card == "smem_walked", verdict
    ordered, _ = by_estimated_cost(servers, spec, cards={"tilelang": verdict.card})
    assert [b.name for b in ordered] == ["triton", "tilelang", "torch"]


@pytest.mark.parametrize("op,n,dtype,weight,bias,cluster", [
    ("layer_norm", 65536, "bfloat16", True, True, 8),
    ("layer_norm", 24584, "float32", False, True, 1),
    ("rms_norm", 151936, "float16", False, False, 8),
])
def test_the_sm90_build(op, n, dtype, weight, bias, cluster):
    from dispatch_tilelang import smem_norms

    cfg = NM.smem_config(n, dtype, cluster, 128)
    assert NM.smem_refusal(n, dtype, 0, cfg) is None
    src = smem_norms.program(op, n, dtype, weight, bias, 1e-5, cfg["tile_n"], cluster, arch="sm_90")(
        block_m=1, threads=128).get_kernel_source()
    assert "cp_async" in src and "rsqrtf" in src
    assert ("tma_store_cluster" in src) == (cluster > 1)
    assert ("(w + " in src) == weight and ("(b + " in src) == bias  # an absent tensor is never read


@pytest.mark.parametrize("n,dtype,cluster", [(65536, "bfloat16", 8), (24584, "float32", 1)])
def test_the_sm90_build_of_layer_norm_in_two_walks(n, dtype, cluster):
    # walks=2: one walk for the sum and the squares about the shift, a second only where the shift
    # is ill placed (a branch on a flag every thread holds alike), then the output
    from dispatch_tilelang import smem_norms

    cfg = NM.smem_config(n, dtype, cluster, 128)
    src = {walks: smem_norms.program("layer_norm", n, dtype, True, True, 1e-5, cfg["tile_n"], cluster, arch="sm_90",
                                     walks=walks)(block_m=1, threads=128).get_kernel_source() for walks in (2, 3)}
    walk = "for (int k"  # a walk of the chunk in shared memory
    assert src[3].count(walk) == 3 and src[2].count(walk) == 3  # two walks, the second squares' under a branch
    assert src[2].count("AllReduce<tl::SumOp") == 3 and src[3].count("AllReduce<tl::SumOp") == 2
    with pytest.raises(ValueError, match="walks must be 2 or 3"):
        smem_norms.program("layer_norm", n, dtype, True, True, 1e-5, cfg["tile_n"], cluster, arch="sm_90", walks=1)


def test_large_clusters_at_256_threads_ship_with_the_launch_bound():
    """Clusters of 8 or 16 chunks at 256 threads ship with the rows kernel's launch bound (the CTAs
    an SM that their chunks allow); one or two chunks a row, and 128 threads, ship without, as the
    H100 sweep found faster; a sweep's twin builds either way."""
    from dispatch_tilelang import smem_norms

    def source(op, n, cluster, threads, **twin):
        cfg = NM.smem_config(n, "bfloat16", cluster, threads)
        return smem_norms.program(op, n, "bfloat16", True, op == "layer_norm", 1e-5, cfg["tile_n"], cluster,
                                  arch="sm_90", **twin)(block_m=1, threads=threads).get_kernel_source()

    # 16 chunks of 16384 (32 KB): 6 CTAs an SM by shared memory; 8 of 20480 (40 KB): 5
    assert "__launch_bounds__(256, 6)" in source("layer_norm", 262144, 16, 256)
    assert "__launch_bounds__(256, 5)" in source("rms_norm", 151936, 8, 256)
    for op, n, cluster, threads in (("layer_norm", 16384, 1, 256), ("layer_norm", 65536, 8, 128),
                                    ("rms_norm", 32768, 2, 256)):
        assert f"__launch_bounds__({threads}, 1)" in source(op, n, cluster, threads)
    assert "__launch_bounds__(256, 6)" in source("layer_norm", 16384, 1, 256, bound=True)
    assert "__launch_bounds__(256, 1)" in source("layer_norm", 262144, 16, 256, bound=False)
