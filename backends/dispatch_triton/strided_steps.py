"""logsumexp over reduced dims that don't collapse to one dim: the strided kernel in steps.

:func:`~dispatch_triton.strided.plan` serves a reduction whose reduced dims collapse to one dim
of the input. logsumexp over dims that don't (dims 0 and 2 of a contiguous ``(A, B, C)``) is
served here in steps, each a :class:`~dispatch_triton.strided.StridedLauncher` over one group of
the reduced dims that does collapse: the first step reads the input in place, each later step the
previous step's result (fp32, contiguous, the input's size over the group's), and only the last
writes the output's dtype. The logsumexp of logsumexps is the logsumexp of the whole (-inf, +inf
and NaN carry through), so no step copies the input.
"""

from __future__ import annotations

import torch
from attrs import frozen

from dispatch.backend import contiguous_strides

from .strided import StridedLauncher, StridedPlan, default_config, plan


@frozen
class Step:
    """One step: logsumexp over ``dims`` of a tensor of ``shape``/``stride``, by ``plan``."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dims: tuple[int, ...]
    plan: StridedPlan


@frozen
class StepPlan:
    """The steps of one call, the first over the input itself."""

    steps: tuple[Step, ...]

    @property
    def first(self) -> StridedPlan:
        return self.steps[0].plan


def _groups(dims, shape, stride) -> list[list[int]]:
    """The reduced dims (of more than one element, in order) in runs that collapse in memory."""
    groups: list[list[int]] = []
    for d in dims:
        if shape[d] == 1:
            continue
        if groups and stride[groups[-1][-1]] == stride[d] * shape[d]:
            groups[-1].append(d)
        else:
            groups.append([d])
    return groups


def step_plan(shape, stride, dims) -> StepPlan | str:
    """The steps of logsumexp over ``dims`` of an input of ``shape``/``stride``, or why there are
    none. Each step reduces the group that leaves the most columns to read along (an inner dim of
    more than one element), the longest of those first."""
    shape, stride, dims = tuple(int(s) for s in shape), tuple(int(s) for s in stride), tuple(sorted(set(dims)))
    steps: list[Step] = []
    while True:
        whole = plan("logsumexp", shape, stride, dims)
        if isinstance(whole, StridedPlan):
            return StepPlan(tuple(steps) + (Step(shape, stride, dims, whole),))
        best = None
        for group in _groups(dims, shape, stride):
            q = plan("logsumexp", shape, stride, group)
            if isinstance(q, StridedPlan) and (best is None or (q.inner == 1, -q.R) < (best[1].inner == 1, -best[1].R)):
                best = (tuple(group), q)
        if best is None:
            return f"{whole}, and no group of them can be reduced first without a copy"
        group, q = best
        steps.append(Step(shape, stride, group, q))
        kept = [i for i in range(len(shape)) if i not in group]
        shape = tuple(shape[i] for i in kept)
        stride = contiguous_strides(shape)
        dims = tuple(kept.index(d) for d in dims if d not in group)


class StepLauncher:
    """``run(x)``: logsumexp of ``x`` by the steps of ``sp`` into a new ``out_shape`` tensor; the
    first step runs ``config``, the later ones (each over a fraction of the input) their default."""

    def __init__(self, sp: StepPlan, out_dtype: torch.dtype, out_shape, device, config: dict):
        self.plan = sp
        self.launchers = []
        for i, st in enumerate(sp.steps):
            last = i == len(sp.steps) - 1
            shape = tuple(out_shape) if last else tuple(s for j, s in enumerate(st.shape) if j not in st.dims)
            cfg = config if i == 0 else default_config(st.plan, device)
            self.launchers.append(StridedLauncher("logsumexp", st.plan, out_dtype if last else torch.float32,
                                                  shape, device, cfg))
        runs = tuple(launcher.run for launcher in self.launchers)

        def run(x):
            for step in runs:
                x = step(x)
            return x

        run.launcher = self
        self.run = run
