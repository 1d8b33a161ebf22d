"""The console the command line prints to: a terminal's own width; for a pipe or a file,
``PIPE_WIDTH`` columns (whatever ``$COLUMNS`` says: test runners and CI shells set it to 80), so
that a table written to a log is not squeezed into 80."""

from __future__ import annotations

from typing import Any

PIPE_WIDTH = 200


def console(stderr: bool = False) -> Any:
    from rich.console import Console

    out = Console(stderr=stderr)
    return out if out.is_terminal else Console(stderr=stderr, width=PIPE_WIDTH)
