"""Everything a backend or op author needs, in one public module.

Backends (built-in and third-party), op packages, plugins and benchmarks import from here and
from the top-level ``dispatch`` namespace only; ``dispatch._*`` modules are internal.

::

    from dispatch.backend import BackendInfo, CallSpec, Verdict, hookimpl
"""

from __future__ import annotations

from ._opdecl import (OpDecl, TensorArg, declare as declare_op, declared as declared_ops, default_examples, rows_bucket,
                      spec_of, with_strides)
from ._keys import device_name, resolve_device
from ._backend import Backend, Fault
from ._plugins import loaded_backends
from ._settings import env_flag
from ._sources import dist_version, source_hash
from ._spec import LONG_ROW, BackendInfo, CallSpec, TensorSpec, Verdict, contiguous_strides, dtype_name, is_dense
from .autotune.compiling import PARSE_LOCK, CompileReport, compile_all, default_workers, serial_parsing
from .autotune.placeholders import lasting_zeros, placeholder
from .autotune.seeding import seed_kwargs, split_build_keys, strip_build_keys, to_config_keys
from .autotune.space import EMPTY, Config, Failure, Timing, TuneResult, TuneSettings, TuneSpace, unique_configs
from .autotune.sweep import pick_winner, sweep
from .autotune.timer import do_bench, measure
from .errors import (BackendFaultError, BackendRefusedError, DispatchError, FaultWarning, NoBackendError,
                     PluginError, TuneError, UnknownBackendError)
from .hookspec import hookimpl
from .norms import norm_dims_contiguous, norm_eps, norm_layout_refusal, norm_row_stride, norm_rows, norm_size
from .reference import (example_inputs, expected_output, gradients_problem, input_safety, reference_kernel,
                        result_problem)
from .strided import ROWS_FIRST_MIN, StridedPlan, StridedStep, logsumexp_steps, row_view, rows_stride, strided_plan
from .tolerance import max_errors, mismatch, tolerance

__all__ = [
    "Backend", "CompileReport", "Fault", "PARSE_LOCK", "compile_all", "default_workers", "loaded_backends",
    "serial_parsing", "OpDecl", "TensorArg", "TensorSpec", "declare_op", "declared_ops", "default_examples", "example_inputs",
    "contiguous_strides", "expected_output", "input_safety", "is_dense", "reference_kernel", "rows_bucket", "spec_of", "with_strides",
    "EMPTY", "LONG_ROW", "BackendFaultError", "BackendInfo", "BackendRefusedError", "CallSpec", "Config", "DispatchError",
    "Failure", "FaultWarning", "NoBackendError", "PluginError", "Timing", "TuneError", "TuneResult", "TuneSettings",
    "TuneSpace", "UnknownBackendError", "Verdict", "device_name", "dist_version", "do_bench", "dtype_name",
    "hookimpl", "lasting_zeros", "max_errors", "measure", "mismatch", "pick_winner", "placeholder", "seed_kwargs", "source_hash",
    "split_build_keys", "strip_build_keys", "sweep", "to_config_keys", "tolerance", "unique_configs",
    "norm_dims_contiguous", "norm_eps", "norm_layout_refusal", "norm_row_stride", "norm_rows", "norm_size",
    "ROWS_FIRST_MIN", "StridedPlan", "StridedStep", "logsumexp_steps", "row_view", "rows_stride", "strided_plan",
    "python_key_op", "env_flag", "result_problem", "gradients_problem", "resolve_device",
]


def python_key_op(op: str):
    """``dispatch.<op>`` with its call key computed in Python, even where the native key is built
    (what a process gets where it can't be), sharing the op's resolved calls: for timing the two
    keys side by side (``benchmarks/bench_launch.py --python-key``)."""
    from ._dispatcher import DISPATCHER

    return DISPATCHER.python_key_function(op)
