"""benchmarks/sweep_lse_forms.py: every form it times gives each chunk's (max, sum) so that the
merged rows are torch's logsumexp, the staged form included at each stage count, and a staged
config never launches more programs an SM than their shared memory lets an SM hold."""

from __future__ import annotations

import pytest
import torch

from benchmark_scripts import load

pytest.importorskip("triton")


@pytest.fixture(scope="module")
def forms():
    return load("sweep_lse_forms")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("form,stages", [("twopass", 0), ("group", 0), ("staged", 1), ("staged", 3)])
def test_each_form_merges_to_torchs_logsumexp(forms, form, stages, dtype):
    x = (torch.randn(3, 1024) * 3).to(dtype)
    x[1, :300] = -float("inf")  # a chunk of -inf, and a run of it into the next
    x[2, 700] = 40.0  # one element far above the rest
    _, merged = forms.form_call(x, form, 256, 1, 1, stages)
    want = torch.logsumexp(x.double(), -1)
    torch.testing.assert_close(merged(), want, rtol=0, atol=2e-3)


def test_the_read_form_sums_the_values(forms):
    x = torch.randn(2, 512).to(torch.bfloat16)
    run, _ = forms.form_call(x, "read", 128, 1, 4)
    sums = run().view(2, 4, 2)[..., 1]
    torch.testing.assert_close(sums.double(), x.double().view(2, 4, 128).sum(-1), rtol=1e-5, atol=1e-4)


def test_rows_not_a_whole_number_of_chunks_are_refused(forms):
    with pytest.raises(ValueError, match="whole number of 256-element chunks"):
        forms.form_call(torch.randn(2, 1000), "twopass", 256, 1, 1)


def test_staged_programs_an_sm_are_capped_by_their_shared_memory(forms):
    per_prog = 2 * 4096 * 2 + 1024  # two 4096-element bf16 chunks in flight
    assert forms.staged_per_sm(32, 4096, 3, 2) == forms.SM_SMEM // per_prog < 32
    assert forms.staged_per_sm(4, 4096, 3, 2) == 4
    assert forms.staged_per_sm(8, 65536, 6, 4) == 1


def test_path_calls_race_each_chunks_config_staged_too_and_each_matches_torch(forms):
    x = (torch.randn(2, 65536) * 3).to(torch.bfloat16)
    x[1, :5000] = -float("inf")  # a run of -inf longer than a chunk
    calls = forms.path_calls(x, [2, 3])
    chunks = [k for k in calls if k.startswith("triton chunks") and "staged" not in k]
    assert chunks and any(k.startswith("triton split") for k in calls)
    for k in chunks:
        assert {f"{k} staged2", f"{k} staged3"} <= set(calls)
    want = torch.logsumexp(x.double(), -1)
    for label, (out, launch) in calls.items():
        launch()
        torch.testing.assert_close(out.double(), want, rtol=0, atol=0.05, msg=label)
