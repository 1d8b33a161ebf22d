"""benchmarks/sweep_triton_width.py: the twins it times are the space's configs at twice and half the
elements a thread, each one a kernel that matches torch, and it refuses to run without a GPU."""

from __future__ import annotations

import pytest
import torch

from benchmark_scripts import load

pytest.importorskip("triton")


@pytest.fixture(scope="module")
def width():
    return load("sweep_triton_width")


@pytest.mark.parametrize("op", ["logsumexp", "softmax"])
def test_each_long_row_config_has_twins_at_twice_and_half_the_elements_a_thread(width, op):
    from dispatch_triton import configs

    space = [c for c in configs.config_space(op, 1024, 65536, torch.bfloat16) if c["path"] in width.LONG_PATHS]
    got = width.width_configs(configs, op, 1024, 65536, torch.bfloat16)
    assert got[:len(space)] == space and len(got) == len(set(map(repr, got)))
    for cfg in space:
        for warps, elements in ((cfg["num_warps"] // 2, 2 * width.per_thread(cfg)),
                                (cfg["num_warps"] * 2, width.per_thread(cfg) // 2)):
            twin = dict(cfg, num_warps=warps)
            assert (twin in got) == (warps >= 1), twin
            if warps >= 1:
                assert width.per_thread(twin) == elements
    assert max(map(width.per_thread, got)) == 2 * max(map(width.per_thread, space))


@pytest.mark.parametrize("op", ["logsumexp", "softmax"])
def test_the_twins_outside_the_space_match_torch(width, op):
    from dispatch_triton import configs
    from dispatch_triton.launch import prepare

    space = configs.config_space(op, 2, 65536, torch.bfloat16)
    twins = [c for c in width.width_configs(configs, op, 2, 65536, torch.bfloat16) if c not in space]
    assert twins
    x = (torch.randn(2, 65536) * 3).to(torch.bfloat16)
    x[1, :5000] = -float("inf")  # a run of -inf longer than a chunk
    xf = x.float()
    want = torch.logsumexp(xf, -1) if op == "logsumexp" else torch.softmax(xf, -1)
    for cfg in twins:
        out, run = prepare(op, x, torch.bfloat16, cfg)
        run()
        torch.testing.assert_close(out.float(), want.to(torch.bfloat16).float(), rtol=1.6e-2, atol=1e-2,
                                   msg=width.label(cfg))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without a GPU")
def test_without_a_gpu_it_says_so(width, tmp_path):
    with pytest.raises(SystemExit, match="needs a CUDA device"):
        width.main(["--out", str(tmp_path)])
