"""The autotune-seeding bugs TileLang users hit, reproduced against the real TileLang (0.1.15 here).

The seeds (TileOPs #1619 and its follow-up) were written against 0.1.11: calling an autotuned
program whose tunables are required raised ``TypeError: missing N required positional
arguments``; seeding them made the autotuner take them for a finished tuning, skip the sweep and
return ``config=None`` (``Best config: None``, and ``None < float`` downstream); passing the seeds
as ``do_not_specialize`` fixed both. What 0.1.15 really does on each path:

1. required tunables, no seeds: no ``TypeError`` any more -- the sweep runs -- unless
   ``do_not_specialize`` is given, which binds the signature and raises
   ``TypeError: missing a required argument: 'block_m'``;
2. seeds without ``do_not_specialize``: still the skip path -- a warning "Tunable parameters
   [...] already provided during auto-tuning. Skipping compilation and using direct JIT", no
   benchmark, and a kernel with ``config=None, latency=None``;
3. seeds with ``do_not_specialize``: the full sweep; the seeds stay out of the cache key, so a
   second call with other seed values returns the tuned kernel without another sweep.

TileLang's benchmark times with CUDA events, which do not exist on a CPU: a sweep that gets that
far fails with "No device is available" per config. That failure is itself the evidence that
the binding and skip checks were passed. To see a sweep *finish* on the CPU (path 3's cache
reuse, and ``tune_native`` end to end) the only thing swapped is TileLang's profiler backend,
for its own wall-clock timer (``native_tune._configured_autotune("wall", 1)``).
"""

from __future__ import annotations

import inspect
import logging

import pytest
import torch

tilelang = pytest.importorskip("tilelang")

import tilelang.cpu.language as T  # noqa: E402
from tilelang.autotuner import autotune, set_autotune_inputs  # noqa: E402

from dispatch.autotune import Config  # noqa: E402
from dispatch.autotune.seeding import (  # noqa: E402
    SeedingError,
    seed_kwargs,
    split_build_keys,
    strip_build_keys,
    to_config_keys,
)
from dispatch.errors import PluginError, TuneError  # noqa: E402
from dispatch_tilelang import availability as A, build as B, configs as C  # noqa: E402
from dispatch_tilelang import native_tune as NT  # noqa: E402

if not A.available("c")[0]:
    pytest.skip(f"TileLang C target unavailable: {A.available('c')[1]}", allow_module_level=True)

N = 48
ALIASES = {"threads_arg": "threads"}  # JIT parameter name -> config key
TUNABLES = ("block_m", "threads")
DEFAULT = {"block_m": 2, "threads": 8, "tile_n": 0}  # tile_n: a build-time key, never a JIT parameter
CONFIGS = [{"block_m": 1, "threads": 8, "tile_n": 0}, {"block_m": 4, "threads": 16, "tile_n": 0}]


def make_program():
    """A fresh ``@tilelang.jit`` C program whose two tunables are required; ``threads_arg`` aliases ``threads``."""

    @tilelang.jit(target="c", out_idx=[1])
    def double(block_m, threads_arg):
        M = T.dynamic("m")

        @T.prim_func
        def main(x: T.Tensor((M, N), "float32"), y: T.Tensor((M, N), "float32")):
            with T.Kernel(T.ceildiv(M, block_m)) as bx:
                for i, jo, ji in T.grid(block_m, N // threads_arg, threads_arg):
                    if bx * block_m + i < M:
                        y[bx * block_m + i, jo * threads_arg + ji] = x[bx * block_m + i, jo * threads_arg + ji] * 2.0

        return main

    return double


def jit_configs(program):
    return [strip_build_keys(c, program, ALIASES) for c in CONFIGS]


def messages(records, level=logging.DEBUG):
    return [r.getMessage() for r in records if r.levelno >= level]


X = torch.randn(8, N)
# TileLang's CUDA-event benchmark of a C-target kernel: no device on a CPU-only machine; with a
# GPU present it moves the inputs there, which the C kernel refuses
TIMER_FAILURES = ("RuntimeError: No device is available", "ValueError: Buffer device mismatch")
if_no_gpu = pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="with a GPU present TileLang's autotuner moves the inputs of a C-target kernel to it; "
           "the CUDA versions of these checks are tests/test_gpu_seeds.py")


# ------------------------------------------------------------------ 1. required tunables


def test_jit_signature_has_required_tunables():
    sig = make_program().signature
    assert [p.default for p in sig.parameters.values()] == [inspect.Parameter.empty] * 2


def test_unseeded_call_no_longer_raises_typeerror_the_sweep_runs(tl_log):
    at = autotune(configs=jit_configs(make_program()), warmup=1, rep=1)(make_program())
    with set_autotune_inputs([X]), pytest.raises(RuntimeError, match="Auto-tuning failed"):
        at()  # 0.1.11: TypeError: missing 2 required positional arguments
    # It got past binding and compiled every candidate; only CUDA-event timing failed on the CPU.
    tested = [m for m in messages(tl_log, logging.WARNING) if "An error occurred while testing config" in m]
    assert len(tested) == len(CONFIGS)
    assert any(reason in m for m in messages(tl_log) for reason in TIMER_FAILURES)


def test_unseeded_call_with_do_not_specialize_raises_typeerror():
    at = autotune(configs=jit_configs(make_program()), warmup=1, rep=1, do_not_specialize=["block_m", "threads_arg"])(make_program())
    with set_autotune_inputs([X]), pytest.raises(TypeError, match="missing a required argument: 'block_m'"):
        at()


# ------------------------------------------------------------- 2. seeds, no exclusion


def test_seeded_without_do_not_specialize_takes_the_skip_path(tl_log):
    program = make_program()
    seeds = seed_kwargs(program, DEFAULT, TUNABLES, ALIASES)
    assert seeds == {"block_m": 2, "threads_arg": 8}
    at = autotune(configs=jit_configs(program), warmup=1, rep=1)(program)
    with set_autotune_inputs([X]):
        kernel = at(**seeds)
    warned = [m for m in messages(tl_log, logging.WARNING) if "already provided during auto-tuning" in m]
    assert warned == ["Tunable parameters ['block_m', 'threads_arg'] already provided during auto-tuning. "
                      "Skipping compilation and using direct JIT"]
    # No candidate was benchmarked (on a CPU each would have logged a failure), and nothing was tuned:
    assert not any("testing config" in m for m in messages(tl_log))
    assert kernel.config is None and kernel.latency is None
    assert list(at._tuner_cache.values()) == [(kernel, None)]
    torch.testing.assert_close(kernel(X), X * 2)  # it is just the seeded config, compiled
    # what a framework must not do, and what it does instead:
    with pytest.raises(TypeError, match="'<' not supported"):
        kernel.latency < float("inf")  # noqa: B015 - the TileOPs bug
    with pytest.raises(TuneError, match="already provided during auto-tuning.*do_not_specialize"):
        NT.tuned_result(kernel, messages(tl_log), seeds)


# ------------------------------------------------------------ 3. seeds + exclusion


def test_seeded_with_do_not_specialize_reaches_the_sweep(tl_log):
    program = make_program()
    seeds = seed_kwargs(program, DEFAULT, TUNABLES, ALIASES)
    at = autotune(configs=jit_configs(program), warmup=1, rep=1, do_not_specialize=list(seeds))(program)
    with set_autotune_inputs([X]), pytest.raises(RuntimeError, match="Auto-tuning failed"):
        at(**seeds)  # binding passed, no skip: every candidate compiled and went to the (CUDA) timer
    assert not any("already provided" in m for m in messages(tl_log))
    assert len([m for m in messages(tl_log, logging.WARNING) if "An error occurred while testing config" in m]) == 2


@if_no_gpu
def test_seeded_with_do_not_specialize_tunes_once_and_other_seeds_reuse_it(tl_log):
    program = make_program()
    seeds = seed_kwargs(program, DEFAULT, TUNABLES, ALIASES)
    at = NT._configured_autotune("wall", 1)(configs=jit_configs(program), warmup=1, rep=3, do_not_specialize=list(seeds))(program)
    with set_autotune_inputs([X]):
        first = at(**seeds)
        assert first.config in jit_configs(program) and first.latency > 0
        tuned = len(messages(tl_log))
        again = at(block_m=4, threads_arg=16)  # other seed values: same cache entry
    assert again is first
    assert len(at._tuner_cache) == 1 and list(at._tuner_cache) == [((), ())]  # the seeds are not in the key
    assert len(messages(tl_log)) == tuned  # no second sweep
    torch.testing.assert_close(again(X), X * 2)


# ------------------------------------------------------------------- tune_native


@if_no_gpu
def test_tune_native_seeds_excludes_strips_and_returns_a_config_and_latency(tl_log):
    best, latency = NT.tune_native(make_program(), CONFIGS, DEFAULT, TUNABLES, ALIASES, warmup=1, rep=3, inputs=[X],
                                   ref_prog=lambda x: x * 2)
    assert best in CONFIGS  # config keys again (threads, not threads_arg), build key tile_n restored
    assert isinstance(latency, float) and latency > 0
    assert not any("already provided" in m for m in messages(tl_log))


@if_no_gpu
def test_tune_native_on_a_real_kernel_family():
    group = [{"block_m": 1, "tile_n": 16}, {"block_m": 4, "tile_n": 16}]
    program = B.jit_program("log_softmax", 37, "float32", "float32", "c", group[0])
    x = torch.randn(9, 37)
    best, latency = NT.tune_native(program, group, C.default_config("log_softmax", 9, 37, "float32", "c"), C.TUNABLES["c"],
                                   C.ALIASES, warmup=1, rep=3, inputs=[x], ref_prog=lambda a: torch.log_softmax(a, -1))
    assert best in group and latency > 0


def test_tune_native_names_every_config_that_measured_nothing():
    with pytest.raises(TuneError) as info:
        NT.tune_native(make_program(), CONFIGS, DEFAULT, TUNABLES, ALIASES, warmup=1, rep=1, inputs=[X], timer="event")
    text = str(info.value)
    assert "measured none of 2 config(s)" in text
    for config in ("{'block_m': 1, 'threads_arg': 8}: ", "{'block_m': 4, 'threads_arg': 16}: "):
        assert any(config + reason in text for reason in TIMER_FAILURES), text


def test_tune_native_tunes_one_family_per_call():
    with pytest.raises(TuneError, match="one kernel family per call"):
        NT.tune_native(make_program(), [CONFIGS[0], {**CONFIGS[1], "tile_n": 64}], DEFAULT, TUNABLES, ALIASES, inputs=[X])


@if_no_gpu
def test_tune_native_seeds_what_the_default_lacks_from_the_first_candidate():
    best, latency = NT.tune_native(make_program(), CONFIGS, {"block_m": 2}, TUNABLES, ALIASES, warmup=1, rep=2, inputs=[X])
    assert best in CONFIGS and latency > 0


# -------------------------------------------------------------- seeding, pure Python


def test_seed_kwargs_maps_aliases_and_filters_to_the_signature():
    def program(n_cols, block_m, threads_arg, num_stages=2):
        pass

    seeds = seed_kwargs(program, {"block_m": 4, "threads": 256, "num_stages": 3, "tile_n": 8}, ["block_m", "threads", "num_stages"],
                        ALIASES)
    assert seeds == {"block_m": 4, "threads_arg": 256}  # n_cols not tunable, num_stages has a default
    everything = seed_kwargs(program, {"block_m": 4, "threads": 256, "num_stages": 3}, ["block_m", "threads", "num_stages"],
                             ALIASES, required_only=False)
    assert everything == {"block_m": 4, "threads_arg": 256, "num_stages": 3}
    assert seed_kwargs(["block_m", "threads_arg"], Config.of(block_m=1, threads=32), TUNABLES, ALIASES) == {"block_m": 1,
                                                                                                           "threads_arg": 32}


def test_seed_kwargs_falls_back_then_fails_loudly():
    assert seed_kwargs(["block_m", "threads_arg"], {"block_m": 1}, TUNABLES, ALIASES, fallback_config={"threads": 64}) == {
        "block_m": 1, "threads_arg": 64}
    with pytest.raises(SeedingError, match=r"threads_arg \(config key 'threads'\)") as info:
        seed_kwargs(["block_m", "threads_arg"], {"block_m": 1}, TUNABLES, ALIASES)
    assert isinstance(info.value, PluginError)


def test_build_keys_are_split_off_and_aliases_round_trip():
    cfg = {"block_m": 2, "threads": 256, "tile_n": 4096, "cluster": 4}
    jit, build = split_build_keys(cfg, ["block_m", "threads_arg"], ALIASES)
    assert jit == {"block_m": 2, "threads_arg": 256} and build == {"tile_n": 4096, "cluster": 4}
    assert strip_build_keys(cfg, ["block_m", "threads_arg"], ALIASES) == jit
    assert {**to_config_keys(jit, ALIASES), **build} == cfg
