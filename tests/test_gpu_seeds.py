"""The autotune-seeding bugs of TileLang users, on a CUDA device, with a real softmax kernel family.

The same three paths as ``test_tilelang_seeds.py`` (which runs them on the C target), here with
TileLang's own CUDA-event timer and a program whose tunables ``block_m``/``threads`` are required:

1. no seeds: with ``do_not_specialize`` the call fails to bind (``TypeError``);
2. seeds without ``do_not_specialize``: TileLang skips the sweep and hands back the seeded
   kernel with ``config=None, latency=None``;
3. the protocol's path (``tune_native``: seeds + ``do_not_specialize``, build keys stripped):
   every candidate is compiled and timed, and a config and a latency come back.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

tilelang = pytest.importorskip("tilelang")

from tilelang.autotuner import autotune, set_autotune_inputs  # noqa: E402

from dispatch.backend import seed_kwargs, strip_build_keys  # noqa: E402
from dispatch_tilelang import build as B, configs as C  # noqa: E402
from dispatch_tilelang import native_tune as NT  # noqa: E402

N = 1024
OP = "softmax"


@pytest.fixture
def family():
    """(program, candidates, default) of the whole-row family for a 64 x 1024 float32 softmax."""
    space = C.config_space(OP, 64, N, "float32", "cuda")
    default = space[0]
    program = B.jit_program(OP, N, "float32", "float32", "cuda", default)
    configs = [c for c in space if (c["tile_n"], c["cluster"]) == (default["tile_n"], default["cluster"])][:3]
    assert len(configs) >= 2, space
    return program, configs, default


@pytest.fixture
def x():
    return torch.randn(64, N, device="cuda")


def messages(records):
    return [r.getMessage() for r in records]


def test_unseeded_call_with_exclusion_fails_to_bind(family, x):
    program, configs, _ = family
    jit_configs = [strip_build_keys(c, program, C.ALIASES) for c in configs]
    at = autotune(configs=jit_configs, warmup=1, rep=1, do_not_specialize=list(C.TUNABLES["cuda"]))(program)
    with set_autotune_inputs([x]), pytest.raises(TypeError, match="missing a required argument: 'block_m'"):
        at()


def test_seeded_without_exclusion_skips_the_sweep(family, x, tl_log):
    program, configs, default = family
    seeds = seed_kwargs(program, default, C.TUNABLES["cuda"], C.ALIASES)
    jit_configs = [strip_build_keys(c, program, C.ALIASES) for c in configs]
    at = autotune(configs=jit_configs, warmup=1, rep=1)(program)
    with set_autotune_inputs([x]):
        kernel = at(**seeds)
    assert any("already provided during auto-tuning" in m for m in messages(tl_log))
    assert kernel.config is None and kernel.latency is None
    torch.testing.assert_close(kernel(x), torch.softmax(x, -1))  # just the seeded config, compiled


def test_tune_native_runs_the_full_sweep_and_returns_a_config_and_a_latency(family, x, tl_log, capsys):
    program, configs, default = family
    best, latency = NT.tune_native(program, configs, default, C.TUNABLES["cuda"], C.ALIASES, warmup=3, rep=10,
                                   inputs=[x], ref_prog=lambda a: torch.softmax(a, -1))
    assert best in configs and isinstance(latency, float) and latency > 0
    assert not any("already provided" in m for m in messages(tl_log))
    # TileLang prints one "Tuned Latency ... at index i" line per candidate it timed
    printed = capsys.readouterr()
    timed = {line.rsplit("at index", 1)[1].strip() for line in (printed.out + printed.err).splitlines()
             if line.startswith("Tuned Latency")}
    assert timed == {str(i) for i in range(len(configs))}, printed
