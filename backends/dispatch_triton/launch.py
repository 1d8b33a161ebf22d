"""Host-side launch of the Triton kernel: argument checks, grid sizing, and the :class:`Launcher`
that :func:`run`, :func:`prepare` and the backend's resolved kernels launch through (its scratch
buffers come from :mod:`dispatch_triton.buffers`)."""

from __future__ import annotations

import functools

import torch

from dispatch.backend import placeholder  # stand-ins for absent optional tensors

from .configs import _OP_CODE, _PATH_CODE, MAX_SPLIT, _cdiv, _check_op, _device_sms, _n_split, _np2
from .direct import DirectLaunch
from .buffers import (_captured_zeros, _lse_buffers, _lse_stream_buffers, _slot_entry, _slot_words,
                      _split_slots, _sync_buffer, _tick, per_stream)
from . import _interpreting
from .jit import _softmax_kernel
from .row_math import fast_exp_of


_IN_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_OUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_MASK_DTYPES = (torch.bool, torch.int8, torch.uint8)

_GMAX = 8192  # most concurrent groups
def _estimate_occupancy(path_code: int, block_n: int, warps: int, esz: int) -> int:
    threads = 32 * warps
    per = max(1, block_n // threads)
    if path_code == 2:
        regs = per * (1 + (0.5 if esz == 2 else 1.0)) + 40
    else:
        regs = per * (2 + 2 * esz / 4) + 40
    return programs_an_sm(min(255, int(-(-regs // 8) * 8)), warps)


SM_REGISTERS, SM_WARPS, SM_PROGRAMS, SM_SMEM = 65536, 64, 32, 228 * 1024  # an sm_90 SM's (1 KB of its shared
# memory reserved a program)


def programs_an_sm(regs: int, warps: int, smem: int = 0) -> int:
    """Programs of ``warps`` warps an sm_90 SM holds at ``regs`` registers a thread (given a warp in
    blocks of 256) and ``smem`` bytes of shared memory a program, within its warp and program limits."""
    per_warp = -(-(max(1, regs) * 32) // 256) * 256
    occ = min(SM_REGISTERS // (per_warp * warps), SM_WARPS // warps, SM_PROGRAMS)
    if smem:
        occ = min(occ, SM_SMEM // (smem + 1024))
    return max(1, occ)


def _occupancy_of(kernel, warps: int) -> int:
    """Programs per SM for a compiled kernel (registers, shared memory, threads, block limit)."""
    kernel._init_handles()
    return programs_an_sm(int(kernel.n_regs), warps, int(getattr(kernel.metadata, "shared", 0) or 0))


_OCC: dict = {}
# the row kernel's constexprs that a launch sets (PHASE aside): the kernel whose occupancy sizes
# the grid is compiled with every one of them, so that it is the kernel the launch runs
_CONSTEXPRS = ("OP", "HAS_MASK", "PATH", "BLOCK_N", "ROWS", "SPLIT", "NW", "NS", "FAST_EXP", "ALIGN", "EVEN")


def _capacity(device: torch.device, args: tuple, meta: dict, options: dict | None = None) -> int:
    """Programs the device holds at once for this launch (measured from the compiled kernel: the
    launch's constexprs, ``meta``, and compile options, ``options``; default num_warps ``NW`` and
    num_stages ``NS``)."""
    path_code, block_n, warps = meta["PATH"], meta["BLOCK_N"], meta["NW"]
    if device.type != "cuda":
        return 2  # interpreter: two groups, so the persistent row loop is exercised
    consts = {k: meta[k] for k in _CONSTEXPRS if k in meta}
    options = dict(options or {"num_warps": warps, "num_stages": meta["NS"]})
    x, out = args[0], args[1]
    key = (device, x.dtype, out.dtype, tuple(sorted(consts.items())), tuple(sorted(options.items())),
           tuple(int(a) % 16 == 0 for a in args[6:11]))
    occ = _OCC.get(key)
    if occ is None:
        try:
            k = _softmax_kernel.warmup(*args, grid=(1,), PHASE=0, **consts, **options)
            occ = _occupancy_of(k, int(options["num_warps"]))
        except Exception:  # pragma: no cover - fall back to a register estimate
            occ = _estimate_occupancy(path_code, block_n, warps, x.element_size())
        _OCC[key] = occ
    return _device_sms(device) * occ


def _grid_size(device, M, N, args, meta, options: dict | None = None) -> int:
    path_code = meta["PATH"]
    if path_code == 0:
        return _cdiv(M, meta["ROWS"])
    ns = _n_split(path_code, N, meta["BLOCK_N"], meta["SPLIT"])
    if path_code == 4:  # logsumexp's chunks: persistent programs over all M * ns chunks
        return max(1, min(M * ns, _capacity(device, args, meta, options)))
    if path_code == 2 and meta["OP"] == _OP_CODE["logsumexp"]:
        # one chunk per program: nothing waits, so no program need stay resident for a row's
        # others; a program that loops would pay a round trip (its row's counter) per chunk
        return M * ns
    return exchange_groups(M, ns, _capacity(device, args, meta, options)) * ns


def exchange_groups(rows: int, per_group: int, capacity: int) -> int:
    """Groups of ``per_group`` programs that wait for each other (a row's chunks): as many as
    ``capacity`` programs resident at once hold, at most one per row and ``_GMAX``, at least one."""
    return max(1, min(rows, capacity // per_group, _GMAX))


def _check_dtypes(in_dtype: torch.dtype, out_dtype: torch.dtype | None) -> torch.dtype:
    """The output dtype (``out_dtype``, or the input's when None), both checked."""
    if in_dtype not in _IN_DTYPES:
        raise TypeError(f"triton kernels take fp32/fp16/bf16 input, not {in_dtype}")
    if out_dtype is None:
        out_dtype = in_dtype
    if out_dtype not in _OUT_DTYPES:
        raise TypeError(f"triton kernels write fp32/fp16/bf16, not {out_dtype}")
    return out_dtype


def _check(op, x, out_dtype, mask):
    """``(M, N, out_dtype, mask)``: the arguments of :func:`prepare` checked; the mask as int8 rows."""
    _check_op(op)
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError("x must be a 2-D tensor (M, N)")
    out_dtype = _check_dtypes(x.dtype, out_dtype)
    M, N = x.shape
    if N > 1 and x.stride(1) != 1:
        raise ValueError("x must have unit stride along its last dim (x.stride(1) == 1)")
    if mask is not None:
        if op == "logsumexp":
            raise ValueError("a mask is only supported for softmax/log_softmax")
        if tuple(mask.shape) != (M, N):
            raise ValueError(f"mask must have shape {(M, N)}, got {tuple(mask.shape)}")
        if mask.dtype not in _MASK_DTYPES:
            raise TypeError(f"mask must be bool/int8/uint8, got {mask.dtype}")
        if mask.device != x.device:
            raise ValueError("mask must be on x's device")
        if N > 1 and mask.stride(1) != 1:
            mask = mask.contiguous()
        if mask.dtype != torch.int8:
            mask = mask.view(torch.int8)  # same bytes; keeps the autotune key one dtype
    return M, N, out_dtype, mask


def _prepare(op, x, out_dtype, mask):
    """``(M, N, out_dtype, mask, out)``: :func:`_check`, and a new output of ``op`` for ``x``."""
    M, N, out_dtype, mask = _check(op, x, out_dtype, mask)
    return M, N, out_dtype, mask, torch.empty(_out_shape(op, M, N), dtype=out_dtype, device=x.device)


def _out_shape(op: str, M: int, N: int) -> tuple[int, ...]:
    return (M,) if op == "logsumexp" else (M, N)


def _empty_result(op, M, N, out):
    if M == 0 or N == 0:
        if op == "logsumexp" and M > 0:
            out.fill_(float("-inf"))
        return True
    return False


ALIGN_ROWS = True  # False: rows off the 16-byte grid take the plain chunks (for A/B timing; see _align)
ONEPASS_ALIGN_MIN_BN = 4096  # one-row-a-program tiles narrower than this keep their plain loads (see _align)


def _align(op: str, code: int, N: int, row_stride: int, ns: int, bn: int, has_mask: bool, in_dtype: torch.dtype,
           out_dtype: torch.dtype, rows: int = 1, stages: int = 1) -> int:
    """1 where the split paths, logsumexp's chunks and the one-row-a-program path (``onepass``,
    ``rows`` 1, tiles of :data:`ONEPASS_ALIGN_MIN_BN` columns or more) read (and write) rows off the
    16-byte grid through aligned windows (``dispatch_triton.window``): a 2-byte dtype, a row length
    or stride that is not a whole number of 16 bytes, no mask, the output's rows (same dtype) as far
    apart as the input's, and ``V - 1`` columns to spare in the last chunk of a row. Rows of 4-byte
    elements keep the plain chunks: on an H200 the windows took bf16 softmax at 2236x30001 from 1882
    to 2580 GB/s but fp32 log_softmax from 3276 to 3155 (benchmarks/results/current/rows_kernels/odd_rows/).
    One row a program, bf16: softmax 16372x4099 (8192-wide tiles) 1645 -> 2117 GB/s, 22362x3001
    (4096) 2844 -> 2972, but log_softmax 44739x1500 (2048) 3006 -> 2703 and 116306x577 (1024)
    2536 -> 2156: narrower tiles keep the plain loads. logsumexp's staged chunks (``num_stages`` > 1,
    their loads pipelined through shared memory) read plain."""
    size = in_dtype.itemsize
    v = 16 // size
    if not ALIGN_ROWS or size != 2 or code not in (0, 2, 3, 4) or has_mask or (
            code == 0 and (rows != 1 or bn < ONEPASS_ALIGN_MIN_BN)) or (code == 4 and stages > 1):
        return 0
    if (N % v == 0 and row_stride % v == 0) or ns * bn - N < v - 1:
        return 0
    if op != "logsumexp" and (row_stride != N or out_dtype != in_dtype):
        return 0
    return 1


def _validate(config: dict, N: int, device: torch.device, op: str | None = None) -> tuple[int, int]:
    code = _PATH_CODE.get(config.get("path"))
    if code is None:
        raise ValueError(f"unknown path {config.get('path')!r}; expected one of {sorted(_PATH_CODE)}")
    fast_exp_of(config)
    if code == 4 and op != "logsumexp":
        raise ValueError(f"path 'chunks' writes one value per row (logsumexp), not {op}")
    if code == 3 and op == "logsumexp":
        raise ValueError("path 'split_pipe' writes whole rows (softmax, log_softmax); for logsumexp use "
                         "'split', 'split_online' or 'online'")
    bn = int(config["BLOCK_N"])
    if bn < 1 or bn & (bn - 1):
        raise ValueError(f"BLOCK_N must be a power of two, got {bn}")
    if code == 0 and bn < N:
        raise ValueError(f"path {config['path']!r} holds whole rows: BLOCK_N={bn} < N={N}")
    reg = config.get("maxnreg")
    if reg is not None and (isinstance(reg, bool) or not isinstance(reg, int) or not (reg == 0 or 24 <= reg <= 255)):
        raise ValueError(f"maxnreg must be an int from 24 to 255 (registers a thread), or 0 or absent for no cap; "
                         f"got {reg!r}")
    ns = _n_split(code, N, bn, int(config.get("SPLIT", 1)))
    if ns > MAX_SPLIT:
        raise ValueError(f"{ns} programs per row > {MAX_SPLIT}: use a larger BLOCK_N or SPLIT")
    if device.type == "cuda" and ns > _device_sms(device):
        raise ValueError(f"{ns} programs per row > {_device_sms(device)} SMs: they could not all be resident")
    return code, ns


class Launcher:
    """Everything a launch of ``op`` needs but its input and output, for one spec and config.

    Built once per (op, M, N, dtypes, row stride, device, config): the checks, the config's
    validation, the grid (on CUDA measured from the compiled kernel's occupancy), the kernel
    bound to its grid, the constant arguments and the constexprs. What is left for each call is
    what must be done per call, in two closures (plain functions, no attribute look-ups):

    ``launch(x, out)``
        Fill ``out`` from ``x``: the kernel launch, and on the split paths the buffers of the
        current stream (softmax/log_softmax move the slot buffer's epoch bookkeeping on, as
        every launch must; logsumexp takes its counters and workspace). On a GPU each stream's
        buffers are bound into launches of their own the first time the stream is met (every
        pointer but the input's and the output's prepacked), so a call costs one look-up.
    ``run(x)``
        A new output (in ``out_shape``) filled by ``launch``: what the Triton backend hands the
        dispatcher for a resolved call (``run.launcher`` is this Launcher).

    ``x`` must hold the M rows of N elements at ``row_stride`` apart, unit stride along a row, in
    ``in_dtype`` on ``device``: the kernel is handed its data pointer and the strides computed
    here, so its shape is not looked at (a 3-D tensor whose leading dims collapse to rows needs
    no view) and is not checked (the dispatcher calls it only with tensors of the spec it was
    built for). ``out_shape`` (default ``(M,)`` for logsumexp, ``(M, N)`` otherwise) is the shape
    the output is allocated in, contiguous: any shape of M (logsumexp) or M * N elements.
    ``like_input=True`` allocates it as ``torch.empty_like(x)`` instead (one argument to parse
    rather than a shape, a dtype and a device): for calls whose input is contiguous, in the
    output's shape and dtype, which the caller guarantees.
    ``mask`` (softmax/log_softmax), as :func:`_check` leaves it, is bound for every launch.

    Each kernel launch goes through a :class:`~dispatch_triton.direct.DirectLaunch` (``direct``
    holds those that eager calls ran): the JIT path on the first call, then the compiled
    kernel's launcher with everything but the tensors prepacked. While a CUDA graph is being
    captured, the split paths take buffers private to the captured launch instead of the
    per-stream ones.
    """

    def __init__(self, op: str, M: int, N: int, in_dtype: torch.dtype, out_dtype: torch.dtype | None,
                 row_stride: int, device: torch.device | str, config: dict, *, mask: torch.Tensor | None = None,
                 out_shape: tuple[int, ...] | None = None, like_input: bool = False):
        _check_op(op)
        out_dtype = _check_dtypes(in_dtype, out_dtype)
        anchor = torch.empty(0, device=device)  # the device with its index; fixes the stand-ins' device
        device = anchor.device
        M, N, row_stride = int(M), int(N), int(row_stride)
        out_shape = _out_shape(op, M, N) if out_shape is None else tuple(int(d) for d in out_shape)
        if _numel(out_shape) != _numel(_out_shape(op, M, N)):
            raise ValueError(f"out_shape {out_shape} does not hold the {op} of {M} rows of {N}")
        self.op, self.M, self.N, self.row_stride, self.device = op, M, N, row_stride, device
        self.in_dtype, self.out_dtype, self.out_shape, self.config = in_dtype, out_dtype, out_shape, dict(config)
        self.empty = M == 0 or N == 0
        self.align = 0  # 1: rows off the 16-byte grid are read through aligned windows (_align)
        self.direct: tuple[DirectLaunch, ...] | list[DirectLaunch] = ()  # the launches eager calls ran
        self._templates: tuple[DirectLaunch, ...] = ()  # what compile() compiles (each kernel once)
        self._stand_ins: tuple = ()  # tensors like a launch's, for compile()
        if self.empty:
            self.grid, single = (0,), None

            def launch(x, out):
                _empty_result(op, M, N, out)
        else:
            self.grid, launch, single = self._build(mask, anchor)
        self.launch = launch
        empty, empty_like = torch.empty, torch.empty_like
        size = out_shape or ((),)  # empty(*size): sizes as varargs parse faster than one tuple

        if like_input and single is not None:  # the common call: one frame, one allocation call
            def run(x: torch.Tensor) -> torch.Tensor:
                out = empty_like(x)
                single.launch(x, out)
                return out
        elif like_input:
            def run(x: torch.Tensor) -> torch.Tensor:
                out = empty_like(x)
                launch(x, out)
                return out
        else:
            def run(x: torch.Tensor) -> torch.Tensor:
                out = empty(*size, dtype=out_dtype, device=device)
                launch(x, out)
                return out

        run.launcher = self
        self.run = run

    def compile(self) -> None:
        """Compile every kernel a launch of this Launcher runs, without launching (see
        :meth:`DirectLaunch.compile`): what a tune does for all its candidates at once, on a
        thread pool, before timing them. Nothing to do under the interpreter or for an empty input."""
        if _interpreting() or self.empty:
            return
        for direct in self._templates:
            direct.compile(*self._stand_ins)

    def _build(self, mask, anchor):
        op, M, N, device, config = self.op, self.M, self.N, self.device, self.config
        code, ns = _validate(config, N, device, op)
        bn, rows, split = int(config["BLOCK_N"]), int(config["ROWS"]), int(config["SPLIT"])
        warps, stages = int(config["num_warps"]), int(config.get("num_stages", 1))
        has_mask = mask is not None
        mask_arg = mask if has_mask else placeholder(anchor, torch.int8)
        ws, sync, slots = placeholder(anchor, torch.float32), _sync_buffer(device, 0), placeholder(anchor, torch.int64)
        ints = (M, N, self.row_stride, N if op != "logsumexp" else 1, mask_arg.stride(0) if has_mask else 0, _np2(N))
        meta = dict(OP=_OP_CODE[op], HAS_MASK=has_mask, PATH=code, BLOCK_N=bn, ROWS=rows, SPLIT=split, NW=warps,
                    NS=stages, FAST_EXP=fast_exp_of(config),
                    ALIGN=_align(op, code, N, self.row_stride, ns, bn, has_mask, self.in_dtype, self.out_dtype, rows,
                                 stages),
                    EVEN=int(code == 4 and N % bn == 0))
        self.align = meta["ALIGN"]
        # the grid is sized from the kernel compiled for these arguments' dtypes: stand-ins for x and out
        occ_args = (placeholder(anchor, self.in_dtype), placeholder(anchor, self.out_dtype), mask_arg, ws, sync, slots,
                    *ints)
        options = dict(num_warps=warps, num_stages=stages)
        if config.get("maxnreg") and device.type == "cuda":
            options["maxnreg"] = int(config["maxnreg"])  # fewer registers a thread: more programs an SM
        grid = (_grid_size(device, M, N, occ_args, meta, options),)
        self._stand_ins = occ_args[:6]
        int_names = ("M", "N", "stride_xm", "stride_om", "stride_mm", "N_BUCKET")

        def launcher(phase: int, fixed: tuple = (), on=grid, writes: int = 1) -> DirectLaunch:
            """The kernel on ``on`` (default: ``grid``) for ``phase``: its JIT path, then its direct
            launch once armed (``fixed``: the trailing pointer arguments that are the same for every
            launch; ``writes``: the argument the launch writes, compared when arming)."""
            tail = dict(zip(int_names, ints), **meta, PHASE=phase)
            return DirectLaunch(_softmax_kernel, on, 6, tail, options, enabled=not _interpreting(), fixed=fixed,
                                out=writes)

        if code != 4 and ns == 1:  # a row (or a tile of rows) a program: every pointer but x's and out's fixed
            k0 = launcher(0, fixed=(mask_arg, ws, sync, slots))

            def launch(x, out):
                k0.launch(x, out)

            self.direct = self._templates = (k0,)
            return grid, launch, k0  # a launch is exactly k0.launch(x, out)
        if _interpreting() or device.type != "cuda":
            return grid, self._build_interpreted(launcher, code, ns, mask_arg, ws, sync, slots), None
        # the split paths on a GPU: each stream's buffers bound into launches of their own once
        # (per_stream), a private one for each launch while a CUDA graph is captured
        if op != "logsumexp" and ns > 1:
            need = M * ns  # the partials of every row, each program publishing one per row
            k_graph, words = launcher(0), _slot_words(need)

            def make(key):  # the stream's slot buffer, counted per launch (epoch bookkeeping)
                entry = _slot_entry(key, need)
                k = launcher(0, fixed=(mask_arg, ws, sync, entry[0]))
                self.direct.append(k)
                return entry, k

            current = per_stream(device, make)

            def launch(x, out):
                bound = current()
                if bound is None:  # captured: a slot buffer private to the captured launch
                    k_graph.launch(x, out, mask_arg, ws, sync, _captured_zeros(words, torch.int64, device))
                    return
                entry, k = bound
                _tick(entry)
                k.launch(x, out)

            self.direct, self._templates = [], (k_graph,)
        else:  # logsumexp over several programs per row (split, chunks): the last to arrive combines
            partials, k_graph = M * ns, launcher(0)

            def make(key):  # the stream's counters (left zeroed by every launch) and workspace
                sync_s, ws_s = _lse_stream_buffers(key, M, partials)
                k = launcher(0, fixed=(mask_arg, ws_s, sync_s, slots))
                self.direct.append(k)
                return k

            current = per_stream(device, make)

            def launch(x, out):
                k = current()
                if k is None:  # captured: counters and workspace private to the captured launch
                    sync_g, ws_g = _lse_buffers(device, M, partials)
                    k_graph.launch(x, out, mask_arg, ws_g, sync_g, slots)
                    return
                k.launch(x, out)

            self.direct, self._templates = [], (k_graph,)
        return grid, launch, None

    def _build_interpreted(self, launcher, code, ns, mask_arg, ws, sync, slots):
        """``launch`` of the split paths under the interpreter: the buffers looked up per launch."""
        op, M, device = self.op, self.M, self.device
        if op != "logsumexp" and ns > 1:
            # the interpreter runs programs one by one: partials could never meet in one launch
            need, k1, k2 = M * ns, launcher(1), launcher(2)

            def launch(x, out):
                buf = _split_slots(device, need)  # counts the launch (epoch bookkeeping)
                k1.launch(x, out, mask_arg, ws, sync, buf)
                k2.launch(x, out, mask_arg, ws, sync, buf)

            self.direct = self._templates = (k1, k2)
        else:  # logsumexp over several programs per row (split, chunks): the last to arrive combines
            k0, partials = launcher(0), M * ns

            def launch(x, out):
                sync_s, ws_s = _lse_buffers(device, M, partials)
                k0.launch(x, out, mask_arg, ws_s, sync_s, slots)

            self.direct = self._templates = (k0,)
        return launch


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def run(op: str, x: torch.Tensor, out_dtype: torch.dtype, config: dict, mask: torch.Tensor | None = None
        ) -> torch.Tensor:
    """Run ``op`` over the rows of ``x`` (M, N) with ``config``; a new tensor in ``out_dtype``.

    ``mask`` (optional, softmax/log_softmax): a keep-mask of shape (M, N), bool/int8/uint8;
    positions where it is 0 count as -inf.
    """
    out, launch = prepare(op, x, out_dtype, config, mask)
    launch()
    return out


def prepare(op: str, x: torch.Tensor, out_dtype: torch.dtype, config: dict, mask: torch.Tensor | None = None):
    """``(out, launch)``: the output tensor and a no-argument callable that fills it.

    Everything but the kernel launch (checks, allocation, grid) happens here, once, through a
    :class:`Launcher`; calling ``launch()`` again recomputes ``out`` in place (what a benchmark
    times). An empty ``x`` gets its (trivial) output here.
    """
    M, N, out_dtype, mask, out = _prepare(op, x, out_dtype, mask)
    launcher = Launcher(op, M, N, x.dtype, out_dtype, x.stride(0), x.device, config, mask=mask)
    if launcher.empty:
        launcher.launch(x, out)
        return out, (lambda: None)
    return out, functools.partial(launcher.launch, x, out)
