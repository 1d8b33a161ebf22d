"""A rich progress bar for an A/B run, on stderr, gone when the run ends."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def rich_progress(label: str = "A/B") -> Iterator[Callable[[int, int, str], None]]:
    """Yield a ``progress(done, total, what)`` callback that drives a transient rich bar."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn(f"[bold]{label}[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.description}"), console=Console(stderr=True), transient=True)
    task = bar.add_task("starting", total=None)

    def update(done: int, total: int, what: str) -> None:
        bar.update(task, completed=done, total=total, description=what)

    with bar:
        yield update
