"""``dispatch.ab.torch_compiled``: a benchmark's torch.compile contender compiles every shape it is
timed on; plain ``torch.compile`` of a torch op runs eager past dynamo's 8 graphs, silently."""

from __future__ import annotations

import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent("""
    import torch
    from torch._dynamo.utils import counters
    {make}
    for i in range(12):
        f = make(torch.softmax)
        x = torch.randn(3, 5 + i)
        torch.testing.assert_close(f(x, -1), torch.softmax(x, -1))
    print(counters["stats"]["unique_graphs"], torch._dynamo.config.recompile_limit)
""")


def _graphs(make: str) -> tuple[int, int]:
    """(graphs dynamo compiled for 12 shapes of ``torch.softmax`` compiled by ``make``, dynamo's
    recompile limit then), in a fresh process (dynamo's limits are process-wide)."""
    done = subprocess.run([sys.executable, "-c", _SCRIPT.format(make=make)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    graphs, limit = done.stdout.strip().splitlines()[-1].split()
    return int(graphs), int(limit)


def test_every_shape_is_compiled_where_plain_torch_compile_falls_back_to_eager():
    plain, default_limit = _graphs("make = lambda fn: torch.compile(fn, dynamic=False, backend='eager')")
    ours, _ = _graphs("from dispatch.ab import torch_compiled\n"
                      "make = lambda fn: torch_compiled(fn, backend='eager')")
    assert default_limit < 12 and plain == default_limit  # the shapes past it ran eager under the compiled name
    assert ours == 12


def test_a_recompile_past_the_raised_limit_raises_instead_of_running_eager():
    script = textwrap.dedent("""
        import torch
        from dispatch.ab import torch_compiled
        f = torch_compiled(torch.softmax, backend="eager")
        torch._dynamo.config.recompile_limit = 2  # as if the shapes outgrew the raised limit
        try:
            for i in range(4):
                f(torch.randn(3, 5 + i), -1)
        except Exception as exc:
            print("raised", type(exc).__name__)
        else:
            print("ran")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1].startswith("raised")
