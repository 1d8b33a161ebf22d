"""benchmarks/profile_strided.py: its config words, and its refusal without a GPU."""

from __future__ import annotations

import pytest
import torch

from benchmark_scripts import load

pytest.importorskip("triton")


@pytest.fixture(scope="module")
def profile():
    return load("profile_strided")


def test_config_words_round_trip_and_default_takes_more_words(profile):
    from dispatch_triton import strided as S

    p = S.plan("softmax", (4096, 4096), (4096, 1), (0,))
    cpu = torch.device("cpu")
    cfg = profile.parse_config("I256 R8 w1 s32 st3 EVEN PREFETCH KEEP_X", p, cpu, 2)
    assert cfg == dict(BLOCK_I=256, BLOCK_R=8, num_warps=1, SPLIT_R=32, num_stages=3, EVEN=1, PREFETCH=1, KEEP_X=1)
    assert profile.parse_config(profile.label(cfg), p, cpu, 2) == cfg
    default = S.default_config(p, cpu, 2)
    assert profile.parse_config("default", p, cpu, 2) == default
    assert profile.parse_config("default KEEP_X", p, cpu, 2) == dict(default, KEEP_X=1)


def test_an_unknown_config_word_is_named(profile):
    from dispatch_triton import strided as S

    p = S.plan("softmax", (64, 64), (64, 1), (0,))
    with pytest.raises(SystemExit, match="unknown word 'FAST'"):
        profile.parse_config("I64 R8 FAST", p, torch.device("cpu"), 2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without a GPU")
def test_without_a_gpu_it_says_so(profile, tmp_path):
    with pytest.raises(SystemExit, match="needs a CUDA device"):
        profile.main(["--out", str(tmp_path)])
