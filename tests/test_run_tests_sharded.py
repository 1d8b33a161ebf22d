"""How benchmarks/run_tests_sharded.py deals a test-suite over its processes."""

from __future__ import annotations

from benchmark_scripts import load

runner = load("run_tests_sharded")


def _ids():
    big = [f"tests/test_big.py::test_{i}" for i in range(40)]
    small = [f"tests/test_small_{m}.py::test_{i}" for m in range(3) for i in range(4)]
    certify = [f"tests/test_triton_backend.py::test_certified_against_the_reference[{op}]"
               for op in ("softmax", "log_softmax", "logsumexp", "rms_norm", "layer_norm")]
    others = ["tests/test_triton_backend.py::test_refuses_what_it_does_not_serve_with_reasons",
              "tests/test_triton_backend.py::test_fast_path_contiguous[softmax]"]
    return big, small, certify, others


def test_every_test_lands_in_exactly_one_shard():
    big, small, certify, others = _ids()
    ids = big + small + certify + others
    shards = runner.deal(ids, 4)
    dealt = [t for shard in shards for t in shard]
    assert sorted(dealt) == sorted(ids)


def test_the_slow_conformance_tests_go_to_different_shards_and_small_modules_stay_whole():
    big, small, certify, others = _ids()
    shards = runner.deal(big + small + certify + others, 5)
    where = {t: i for i, shard in enumerate(shards) for t in shard}
    assert len({where[t] for t in certify}) == 5  # one a shard
    for m in range(3):  # a module's few tests share one process
        assert len({where[t] for t in small if f"test_small_{m}.py" in t}) == 1
    assert len({where[t] for t in others}) == 1  # the rest of the conformance tests' module stays whole
    assert len({where[t] for t in big}) == 5  # a module past its share is dealt round-robin


def test_resume_reads_each_outcome_of_a_verbose_log_and_nothing_else():
    log = "\n".join([
        "tests/test_a.py::test_x[softmax-dtype0] PASSED [ 10%]",
        "tests/test_a.py::test_y SKIPPED (no GPU) [ 20%]",
        "tests/test_b.py::test_z[1-2] FAILED [ 30%]",
        "tests/test_b.py::test_w XFAIL (known) [ 40%]",
        "tests/test_c.py::test_v[tilelang-(1, 4096)-torch.float32-softmax] PASSED [ 45%]",  # spaces in its id
        "tests/test_c.py::test_u[shape=[2, 3]-x] SKIPPED (no GPU) [ 48%]",  # and brackets
        "tests/test_b.py::test_stopped_midway ",  # the run was killed while it ran
        "tests/test_c.py::test_t[(2, 3)] ",  # so too, with a space in its id
        "FAILED tests/test_b.py::test_z[1-2] - AssertionError",  # the -rfE summary line
    ])
    assert runner.finished(log) == {"tests/test_a.py::test_x[softmax-dtype0]", "tests/test_a.py::test_y",
                                    "tests/test_b.py::test_z[1-2]", "tests/test_b.py::test_w",
                                    "tests/test_c.py::test_v[tilelang-(1, 4096)-torch.float32-softmax]",
                                    "tests/test_c.py::test_u[shape=[2, 3]-x]"}
