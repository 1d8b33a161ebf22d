"""logsumexp over reduced dims that don't collapse to one dim: the strided kernel in steps.

:func:`~dispatch_triton.strided.plan` serves a reduction whose reduced dims collapse to one dim
of the input. logsumexp over dims that don't (dims 0 and 2 of a contiguous ``(A, B, C)``) is
served here in steps (:func:`dispatch.backend.logsumexp_steps` plans them), each a
:class:`~dispatch_triton.strided.StridedLauncher` over one group of the reduced dims that does
collapse: the first step reads the input in place, each later step the previous step's result
(fp32, contiguous, the input's size over the group's), and only the last writes the output's
dtype. The logsumexp of logsumexps is the logsumexp of the whole (-inf, +inf and NaN carry
through), so no step copies the input.
"""

from __future__ import annotations

import torch
from attrs import frozen

from dispatch.backend import StridedPlan, StridedStep, logsumexp_steps

from .strided import StridedLauncher, default_config


@frozen
class StepPlan:
    """The steps of one call, the first over the input itself."""

    steps: tuple[StridedStep, ...]

    @property
    def first(self) -> StridedPlan:
        return self.steps[0].plan


def step_plan(shape, stride, dims) -> StepPlan | str:
    """The steps of logsumexp over ``dims`` of an input of ``shape``/``stride``, or why there are none."""
    steps = logsumexp_steps(shape, stride, dims)
    return steps if isinstance(steps, str) else StepPlan(steps)


class StepLauncher:
    """``run(x)``: logsumexp of ``x`` by the steps of ``sp`` into a new ``out_shape`` tensor; the
    first step runs ``config``, the later ones (each over a fraction of the input, in fp32) their default."""

    def __init__(self, sp: StepPlan, out_dtype: torch.dtype, out_shape, device, config: dict):
        self.plan = sp
        self.launchers = []
        for i, st in enumerate(sp.steps):
            last = i == len(sp.steps) - 1
            shape = tuple(out_shape) if last else tuple(s for j, s in enumerate(st.shape) if j not in st.dims)
            cfg = config if i == 0 else default_config(st.plan, device, 4)  # fp32 partial results
            self.launchers.append(StridedLauncher("logsumexp", st.plan, out_dtype if last else torch.float32,
                                                  shape, device, cfg))
        runs = tuple(launcher.run for launcher in self.launchers)

        def run(x):
            for step in runs:
                x = step(x)
            return x

        run.launcher = self
        self.run = run
