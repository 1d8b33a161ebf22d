"""logsumexp over reduced dims that don't collapse to one dim: the strided kernel in steps.

:func:`~dispatch_triton.strided.plan` serves a reduction whose reduced dims collapse to one dim
of the input. logsumexp over dims that don't (dims 0 and 2 of a contiguous ``(A, B, C)``) is
served here in steps (:func:`dispatch.backend.logsumexp_steps` plans them), each a
:class:`~dispatch_triton.strided.StridedLauncher` over one group of the reduced dims that does
collapse: the first step reads the input in place, each later step the previous step's result
(fp32, contiguous, the input's size over the group's), and only the last writes the output's
dtype. The logsumexp of logsumexps is the logsumexp of the whole (-inf, +inf and NaN carry
through), so no step copies the input.

A step that reads rows (:func:`dispatch.backend.row_view`: its reduced dim unit-stride, the kept
dims one group of rows one stride apart) runs the row kernel (:class:`~dispatch_triton.launch.Launcher`)
instead, and the steps are planned with such a group first where its rows hold at least
``ROWS_FIRST_MIN`` elements (``rows_first``): dims 0 and 2 of a contiguous ``(512, 64, 512)``
read as 32768 rows of 512, then a column of 512 for each of 64 outputs, rather than the strided
kernel over dim 0 first. Where the first step reads rows, its config is a row kernel config (the
call's tune space is the row kernel's for those rows).
"""

from __future__ import annotations

import torch
from attrs import frozen

from dispatch.backend import StridedPlan, StridedStep, logsumexp_steps, row_view

from . import configs as row_configs
from .launch import Launcher
from .strided import StridedLauncher, default_config


@frozen
class StepPlan:
    """The steps of one call, the first over the input itself."""

    steps: tuple[StridedStep, ...]

    @property
    def first(self) -> StridedPlan:
        return self.steps[0].plan

    @property
    def first_rows(self) -> tuple[int, int, int] | None:
        """``(rows, row length, row stride)`` where the first step reads rows (the row kernel's), else None."""
        return row_view(self.first)


def step_plan(shape, stride, dims) -> StepPlan | str:
    """The steps of logsumexp over ``dims`` of an input of ``shape``/``stride``, or why there are none."""
    steps = logsumexp_steps(shape, stride, dims, rows_first=True)
    return steps if isinstance(steps, str) else StepPlan(steps)


def _step_launcher(st: StridedStep, in_dtype: torch.dtype, out_dtype: torch.dtype, shape: tuple, device,
                   config: dict | None):
    """One step's launcher: the row kernel's where the step reads rows, else the strided kernel's;
    ``config`` None: its default (for ``in_dtype``)."""
    rows = row_view(st.plan)
    if rows is not None:
        m, n, stride = rows
        cfg = config if config is not None else row_configs.default_config("logsumexp", m, n, in_dtype)
        return Launcher("logsumexp", m, n, in_dtype, out_dtype, stride, device, cfg, out_shape=shape)
    cfg = config if config is not None else default_config(st.plan, device, in_dtype.itemsize)
    return StridedLauncher("logsumexp", st.plan, out_dtype, shape, device, cfg)


class StepLauncher:
    """``run(x)``: logsumexp of ``x`` (of ``in_dtype``) by the steps of ``sp`` into a new
    ``out_shape`` tensor; the first step runs ``config``, the later ones (each over a fraction of
    the input, in fp32) their default (``config`` None: the first step's default too)."""

    def __init__(self, sp: StepPlan, in_dtype: torch.dtype, out_dtype: torch.dtype, out_shape, device,
                 config: dict | None):
        self.plan = sp
        self.launchers = []
        for i, st in enumerate(sp.steps):
            last = i == len(sp.steps) - 1
            shape = tuple(out_shape) if last else tuple(s for j, s in enumerate(st.shape) if j not in st.dims)
            self.launchers.append(_step_launcher(st, in_dtype if i == 0 else torch.float32,
                                                 out_dtype if last else torch.float32, shape, device,
                                                 config if i == 0 else None))
        runs = tuple(launcher.run for launcher in self.launchers)

        def run(x):
            for step in runs:
                x = step(x)
            return x

        run.launcher = self
        self.run = run
