"""rms_norm and layer_norm on Triton, host side: the forward's launcher, Triton's autotuner over it and the hooks.

The forward's config space, its defaults and checks, and the grids a config launches are in
:mod:`dispatch_triton.norm_configs` (the names imported from it are this module's too); the kernels in
:mod:`dispatch_triton.norm_kernels`; the backward in :mod:`dispatch_triton.norm_backward`.

Every launch goes through a :class:`~dispatch_triton.direct.DirectLaunch`: after the first call
the compiled kernel's launcher is called with its arguments prepacked.
"""

from __future__ import annotations

import threading

import torch
import triton

from dispatch.backend import placeholder, unique_configs

from . import _interpreting
from .direct import DirectLaunch
from .buffers import _split_slots
from .norm_configs import (
    _MAX_ONE_PASS,
    _cdiv,
    _cfg,
    _check_config,
    _coop_grid,
    _fwd_grid,
    _np2,
    _persist_regs,
    config_space,
    coop,
    default_config,
    one_pass,
)
from .norm_kernels import _norm_fwd

NORM_OPS = ("rms_norm", "layer_norm")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAX_N = 1 << 20  # longest row served


class NormLauncher:
    """The forward of one norm call shape: ``run(x, weight, bias)`` -> a new output.

    Built once per (op, M, N, dtype, row stride, device, config, weight/bias present): the grid,
    the constexprs and the placeholders for absent weight/bias (cached, of the input's dtype) are
    fixed here; a call allocates the output (and the split path's workspace) and launches.
    """

    def __init__(self, op: str, m: int, n: int, dtype: torch.dtype, row_stride: int, device: torch.device,
                 config: dict, eps: float, has_weight: bool, has_bias: bool, out_shape: tuple[int, ...],
                 like_input: bool = False, out_dtype: torch.dtype | None = None):
        if op not in NORM_OPS:
            raise ValueError(f"'op' must be one of {NORM_OPS} (got {op!r})")
        _check_config(config, n)
        anchor = torch.empty(0, device=device)
        device = anchor.device
        self.config = dict(config)
        # the result's dtype, the weight's and the bias's: the input's, or float32 for a half-precision
        # input read under autocast (the kernel stores in its output pointer's dtype)
        out_dtype = dtype if out_dtype is None else out_dtype
        if int(config.get("PACK", 0)) and (op != "layer_norm" or not coop(config) or out_dtype.itemsize != 2):
            raise ValueError(f"config PACK keeps layer_norm's partials to 16 significant bits, for the COOP "
                             f"path and a 2-byte result: not {op} with {config} writing {out_dtype}")
        if like_input and out_dtype != dtype:
            raise ValueError(f"'like_input' makes the output like the input: its dtype {dtype} is not "
                             f"'out_dtype' {out_dtype}")
        empty, size = torch.empty, tuple(out_shape)  # empty(*size): varargs parse faster than a tuple
        if like_input:  # a dense input of the output's shape and dtype: empty_like parses faster still
            new_y = torch.empty_like  # called as new_y(x): no Python frame
        else:
            def new_y(x):
                return empty(*size, dtype=out_dtype, device=device)
        self.direct: tuple[DirectLaunch, ...] = ()
        if m == 0 or n == 0:
            def run(x, weight=None, bias=None, saved=None):
                return empty(size, dtype=out_dtype, device=device)
            self.run = run
            return
        ph = placeholder(anchor, out_dtype)  # an absent weight or bias: of a present one's dtype
        ph32 = placeholder(anchor, torch.float32)
        is_coop = coop(config)
        # what compile() builds with: tensors like a call's (the COOP path's workspace is its slot
        # buffer; the last, the statistics a backward takes)
        self._stand_ins = (placeholder(anchor, dtype),) + (ph,) * 3 + (
            placeholder(anchor, torch.int64) if is_coop else ph32, ph32)
        meta = dict(IS_RMS=op == "rms_norm", HAS_WEIGHT=has_weight, HAS_BIAS=has_bias,
                    BLOCK_N=int(config["BLOCK_N"]), ROWS=int(config["ROWS"]),
                    PREFETCH=int(config.get("PREFETCH", 0)), HINTS=int(config.get("HINTS", 0)), COOP=int(is_coop),
                    ONE_SUM=int(config.get("ONE_SUM", 0)), WB_EACH=int(config.get("WB_EACH", 0)),
                    STAGES=int(config.get("STAGES", 0)), LANES=int(config.get("LANES", 0)),
                    PACK=int(config.get("PACK", 0)),
                    CHUNKS_P2=_np2(_cdiv(n, int(config["BLOCK_N"]))) if is_coop else 0)
        ints = dict(M=m, N=n, stride_xm=row_stride, stride_ym=n, eps=float(eps), N_BUCKET=_np2(n))
        options = dict(num_warps=int(config["num_warps"]), num_stages=int(config.get("num_stages", 1)))
        if device.type == "cuda" and int(config.get("PERSIST", 0)) and one_pass(config, n):
            options["maxnreg"] = _persist_regs(config)
        elif device.type == "cuda" and int(config.get("REGS", 0)):
            options["maxnreg"] = int(config["REGS"])
        enabled = not _interpreting()
        split = int(config["SPLIT"])
        common = dict(ONE_PASS=False, SPLIT=1, PERSIST=0)

        def launches(stats: int) -> tuple[DirectLaunch, ...]:
            # the path's launches; stats 1: they also store each row's statistics (STATS) where a
            # call's sixth tensor says; else that argument is fixed (a placeholder, never written)
            m_meta = dict(meta, STATS=stats)

            def launcher(grid, out=1, opts=options, **kw):
                return DirectLaunch(_norm_fwd, grid, 6, dict(ints, **m_meta, **kw), opts, enabled=enabled,
                                    checked=(0, 2, 3), out=out, fixed=() if stats else (ph32,))

            if is_coop:  # one launch; the interpreter's two: publish, then await
                return self._coop(m, n, config, device, launcher, dtype, ints, m_meta, options)
            if one_pass(config, n):
                return (launcher((_fwd_grid(m, config, device),), PHASE=0, ONE_PASS=True, SPLIT=1,
                                 PERSIST=int(config.get("PERSIST", 0))),)
            if split > 1:
                return (launcher((m, split), out=4, PHASE=1, **dict(common, SPLIT=split)),
                        launcher((m, split), PHASE=2, **dict(common, SPLIT=split)))
            return (launcher((m,), PHASE=0, **common),)

        stages = self.direct = launches(0)
        saving: list = []  # the STATS launches, built at the first call that asks for statistics

        def stats_launches():
            if not saving:
                saving.append(launches(1))
            return saving[0]

        if len(stages) == 1 and not is_coop:  # one launch, no workspace
            k0 = stages[0]

            def run(x, weight=None, bias=None, saved=None):
                y = new_y(x)
                if saved is None:
                    k0.launch(x, y, ph if weight is None else weight, ph if bias is None else bias, ph32)
                else:
                    stats_launches()[0].launch(x, y, ph if weight is None else weight,
                                               ph if bias is None else bias, ph32, saved[0])
                return y
        else:
            if is_coop:
                need = m * _cdiv(n, int(config["BLOCK_N"]))  # the partials of every row and chunk

                def ws_of():
                    return _split_slots(device, need)  # the stream's, or one private to a captured launch
            else:
                ws_size = 2 * m * split

                def ws_of():
                    return empty(ws_size, dtype=torch.float32, device=device)

            def run(x, weight=None, bias=None, saved=None):
                y = new_y(x)
                ws = ws_of()
                w = ph if weight is None else weight
                b = ph if bias is None else bias
                if saved is None:
                    for k in stages:  # k.launch, not a bound copy: arming replaces it
                        k.launch(x, y, w, b, ws)
                else:
                    for k in stats_launches():
                        k.launch(x, y, w, b, ws, saved[0])
                return y
        self.run = run

    def compile(self) -> None:
        """Compile (and load) every kernel a call runs, without launching: the JIT's warm-up path, so
        the first call finds them in its cache. Nothing to do under the interpreter or for empty shapes."""
        if _interpreting():
            return
        for direct in self.direct:
            direct.compile(*self._stand_ins)

    def _coop(self, m, n, config, device, launcher, dtype, ints, meta, options):
        """The COOP path's launches: one on the GPU; under the interpreter, which runs programs one
        after another (partials could never meet in one launch), PHASE 1 (publish) then PHASE 2.

        The grid is the plain kernel's (``STATS`` 0), whose registers decide how many programs a
        multiprocessor holds; the variant that also stores the rows' statistics is compiled with
        ``maxnreg`` at that kernel's count, so that it fits the same groups (on the H200, compiled
        freely, it ran layer_norm bf16 64 x 262144 in 42 us, capped in 40; 36 without the store)."""
        common = dict(ONE_PASS=False, SPLIT=1, PERSIST=0)
        stand_ins = self._stand_ins  # x, y, weight, bias, the slot buffer and the statistics, as compile()'s
        plain = dict(meta, STATS=0)

        def compile_fn():
            return _norm_fwd.warmup(*stand_ins, grid=(1,), **ints, **plain, **common, PHASE=0, **options)

        # what the compiled kernel depends on (M and eps are not specialized on: not in the key)
        key = (tuple(t.dtype for t in stand_ins), tuple(sorted(plain.items())), tuple(sorted(options.items())),
               tuple((k, v) for k, v in ints.items() if k not in ("M", "eps")))
        grid = (_coop_grid(m, n, config, device, compile_fn, key),)
        if _interpreting():
            return (launcher(grid, PHASE=1, **common), launcher(grid, PHASE=2, **common))
        opts = options
        if meta.get("STATS") and device.type == "cuda":
            compiled = compile_fn()  # the JIT's cache: compiled already by the grid's sizing
            compiled._init_handles()
            opts = dict(options, maxnreg=int(compiled.n_regs))
        return (launcher(grid, opts=opts, PHASE=0, **common),)


# -- Triton's native autotuner over the forward ---------------------------------------------------

_AUTOTUNED: dict = {}
_LOCK = threading.Lock()


def _to_triton(c: dict) -> triton.Config:
    return triton.Config({"BLOCK_N": c["BLOCK_N"], "ROWS": c["ROWS"], "PERSIST": c["PERSIST"]},
                         num_warps=c["num_warps"], num_stages=c["num_stages"],
                         maxnreg=_persist_regs(c) if c["PERSIST"] else None)


def config_from_triton(cfg: triton.Config) -> dict:
    """The config dict of a ``triton.Config`` built here (an autotuner's winner)."""
    return _cfg(cfg.kwargs["BLOCK_N"], cfg.kwargs["ROWS"], 1, cfg.num_warps, cfg.num_stages, cfg.kwargs["PERSIST"])


def _universe() -> list[dict]:
    return unique_configs(c for k in range(0, 21) for c in config_space(1 << 20, 1 << k, torch.float32)
                          if c["SPLIT"] == 1 and not coop(c))


def autotuned(do_bench=None):
    """``_norm_fwd`` under ``triton.autotune`` (one per ``do_bench``): one launch per call, configs of
    one program per row (``SPLIT`` 1), pruned per launch to the row length's bucket.

    ``key`` is ``N_BUCKET`` alone (Triton adds every tensor argument's dtype): ``HAS_WEIGHT``,
    ``HAS_BIAS`` and ``IS_RMS`` stay out of it, and :func:`run_autotuned` passes a placeholder of the
    input's dtype for an absent weight or bias, so calls with and without them share one entry.
    """
    fn = _AUTOTUNED.get(do_bench)
    if fn is None:
        with _LOCK:
            fn = _AUTOTUNED.get(do_bench)
            if fn is None:
                def prune(configs, named_args, **kwargs):
                    n = int(named_args["N"])
                    onep = _np2(n) <= _MAX_ONE_PASS  # what run_autotuned passes as ONE_PASS
                    allowed = {(c["BLOCK_N"], c["ROWS"], c["PERSIST"], c["num_warps"])
                               for c in config_space(int(named_args["M"]), n, named_args["x_ptr"].dtype)
                               if c["SPLIT"] == 1 and not coop(c) and one_pass(c, n) == onep}
                    kept = [c for c in configs
                            if (c.kwargs["BLOCK_N"], c.kwargs["ROWS"], c.kwargs["PERSIST"], c.num_warps) in allowed]
                    if not kept:
                        raise ValueError(f"no norm config fits N={n}")
                    return kept

                fn = triton.autotune(configs=[_to_triton(c) for c in _universe()], key=["N_BUCKET"],
                                     prune_configs_by={"early_config_prune": prune}, do_bench=do_bench)(_norm_fwd)
                _AUTOTUNED[do_bench] = fn
    return fn


def run_autotuned(op: str, x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                  eps: float = 1e-5, do_bench=None) -> torch.Tensor:
    """``op`` over the rows of a 2-D ``x`` (unit stride along a row), the config chosen by Triton's autotuner."""
    if op not in NORM_OPS:
        raise ValueError(f"'op' must be one of {NORM_OPS} (got {op!r})")
    if x.dim() != 2 or (x.shape[1] > 1 and x.stride(1) != 1):
        raise ValueError(f"'x' must be 2-D with unit stride along its rows (got shape {tuple(x.shape)}, "
                         f"strides {x.stride()})")
    m, n = x.shape
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return y
    kernel = autotuned(do_bench)
    ph = placeholder(x, x.dtype)

    def grid(meta):
        return (_fwd_grid(m, meta, x.device) if meta["ONE_PASS"] else m, 1)

    # ONE_PASS follows from the config: every candidate of a bucket agrees (pruned to it)
    onep = _np2(n) <= _MAX_ONE_PASS
    kernel[grid](x, y, ph if weight is None else weight, ph if bias is None else bias, ph, ph, m, n, x.stride(0), n,
                 float(eps), _np2(n), IS_RMS=op == "rms_norm", HAS_WEIGHT=weight is not None,
                 HAS_BIAS=bias is not None, PHASE=0, ONE_PASS=onep, SPLIT=1)
    return y


# -- the backend's hooks for the norm ops -------------------------------------------------------

def check(spec) -> "Verdict":
    """Can the Triton kernels serve this norm call? (called by the backend's ``dispatch_check``)."""
    from dispatch.backend import Verdict, dtype_name, norm_layout_refusal, norm_size

    if spec.dtype not in DTYPES:
        return Verdict.no(f"input dtype {dtype_name(spec.dtype)} not served; float32, float16 and bfloat16 are")
    if spec.out_dtype != spec.dtype and spec.out_dtype != torch.float32:
        return Verdict.no(f"a {dtype_name(spec.dtype)} input with a {dtype_name(spec.out_dtype)} result: the "
                          "kernels write the input's dtype, or float32 (a half-precision input under autocast)")
    for t in spec.tensors[1:]:
        if t.present and t.dtype != spec.out_dtype:
            return Verdict.no(f"{t.name} dtype {dtype_name(t.dtype)} differs from the result's "
                              f"({dtype_name(spec.out_dtype)}); pass them in one dtype")
        if t.present and not t.dense:
            return Verdict.no(f"{t.name} must be contiguous (got strides {list(t.stride)})")
    n = norm_size(spec)
    if n > MAX_N:
        return Verdict.no(f"normalized size {n} > {MAX_N}, the longest row these kernels hold")
    refusal = norm_layout_refusal(spec)
    if refusal is not None:
        return Verdict.no(refusal)
    return Verdict.yes()



def _shape(spec) -> tuple[int, int]:
    from dispatch.backend import norm_rows, norm_size

    return norm_rows(spec), norm_size(spec)


def tune_space(spec):
    from dispatch.backend import TuneSpace

    m, n = _shape(spec)
    configs = config_space(m, n, spec.dtype, spec.device, spec.op, spec.out_dtype)
    default = dict(configs[0])
    return TuneSpace(configs=configs, default=default, tunables=tuple(default))


def kernel(spec, config):
    from dispatch.backend import norm_eps, norm_row_stride

    m, n = _shape(spec)
    cfg = dict(config.as_dict()) if config else default_config(m, n, spec.dtype, spec.device, spec.op, spec.out_dtype)
    present = [t.present for t in spec.tensors[1:]] + [False]
    return NormLauncher(spec.op, m, n, spec.dtype, norm_row_stride(spec), spec.device, cfg, norm_eps(spec),
                        present[0], present[1], spec.out_shape,
                        like_input=spec.input.dense and spec.out_dtype == spec.dtype, out_dtype=spec.out_dtype).run


def backward(spec):
    from dispatch.backend import norm_eps, norm_row_stride

    from .norm_backward import make_backward  # loaded at the first backward asked for

    m, n = _shape(spec)
    present = [t.present for t in spec.tensors[1:]] + [False]
    wanted = [t.requires_grad for t in spec.tensors[1:]] + [False]
    return make_backward(spec.op, m, n, spec.dtype, norm_row_stride(spec), norm_eps(spec), present[0], present[1],
                         wanted[0], wanted[1])
