"""Compiling a tune's candidates ahead of their timing, on a pool of threads.

A tune compiles every candidate before it times any: compiling is the CPU's work (a DSL's
lowering, ``ptxas``, ``nvcc``), timing the GPU's, and candidates compiled one after another
leave every core but one idle. :func:`compile_all` runs one job per config on a thread pool
(the compilers release the GIL or run as subprocesses, so threads overlap) and reports which
configs compiled, which failed and why, and how long it took. A config that fails to compile is
dropped from the tune with its reason, never the tune itself.

Threads that parse Python at once can break CPython 3.11's ``ast`` module ("SystemError: AST
constructor recursion depth mismatch": the module's recursion counter is shared, and a thread
switch inside one conversion lets another change it), and DSL front ends parse kernel sources
on every compile. While compiles run (:func:`serial_parsing`), ``ast.parse`` therefore takes
:data:`PARSE_LOCK`, which a backend also holds around anything else that builds or compiles
Python ASTs (TileLang's tracing).
"""

from __future__ import annotations

import ast
import concurrent.futures
import contextlib
import os
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from attrs import field, frozen

from .space import Config, Failure

ENV_WORKERS = "DISPATCH_COMPILE_WORKERS"


def default_workers() -> int:
    """Threads for compiling: ``$DISPATCH_COMPILE_WORKERS``, else the CPUs this process may run on."""
    try:
        cpus = max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cpus = max(1, os.cpu_count() or 1)
    env = os.environ.get(ENV_WORKERS, "").strip()
    if env:
        try:
            workers = int(env)
        except ValueError:
            workers = 0
        if workers >= 1:
            return workers
        warnings.warn(f"{ENV_WORKERS}={env!r} is not a whole number of threads of 1 or more (e.g. 1 or 8); "
                      f"compiling on {cpus}, one per CPU", RuntimeWarning, stacklevel=2)
    return cpus


PARSE_LOCK = threading.RLock()
_parse_guard = threading.Lock()
_parse_users = 0
_original_parse = ast.parse


def _serial_parse(*args: Any, **kwargs: Any) -> Any:
    with PARSE_LOCK:
        return _original_parse(*args, **kwargs)


@contextlib.contextmanager
def serial_parsing():
    """Within it (on every thread), ``ast.parse`` holds :data:`PARSE_LOCK`: one parse at a time in
    the process. Nested and concurrent uses share one installation; the last to leave restores
    ``ast.parse`` (unless someone replaced it meanwhile)."""
    global _parse_users, _original_parse
    with _parse_guard:
        if _parse_users == 0 and ast.parse is not _serial_parse:
            _original_parse = ast.parse
            ast.parse = _serial_parse
        _parse_users += 1
    try:
        yield
    finally:
        with _parse_guard:
            _parse_users -= 1
            if _parse_users == 0 and ast.parse is _serial_parse:
                ast.parse = _original_parse


_interrupted = threading.Event()


def interrupt() -> None:
    """Ctrl-C: the compiles not yet started in every :func:`compile_all` of the process give up,
    and those calls raise KeyboardInterrupt (so a tune running in another thread stops too, and
    caches nothing, instead of going on without the configs that were never compiled)."""
    _interrupted.set()


def resume() -> None:
    """Compile again after :func:`interrupt` (a tune begun after the interrupted one calls it)."""
    _interrupted.clear()


class _Interrupted(Exception):
    pass


@frozen
class CompileReport:
    """What a compile step did: the configs that compiled, those that failed (and why), its seconds."""

    compiled: tuple[Config, ...] = field(converter=tuple)
    failures: tuple[Failure, ...] = field(default=(), converter=tuple)
    seconds: float = 0.0


def compile_all(configs: Sequence[Config], compile_one: Callable[[Config], Any], workers: int | None = None,
                progress: Callable[[Config, str | None], None] | None = None) -> CompileReport:
    """Run ``compile_one(config)`` for every config on a pool of ``workers`` threads (default:
    :func:`default_workers`, at most one per config); return a :class:`CompileReport` in the
    configs' order.

    An exception from ``compile_one`` fails that config only (its reason is recorded). Ctrl-C
    (a KeyboardInterrupt here or in a job, or :func:`interrupt`) stops the compiles not yet started,
    in this call and every other, and is raised again; those running finish in the background (a
    thread cannot be stopped), and what they leave is the DSL's own cache.
    ``progress(config, why_failed)`` is called as each config finishes (``why_failed`` None when
    it compiled).
    """
    configs = list(configs)
    start = time.perf_counter()
    if not configs:
        return CompileReport((), (), 0.0)
    workers = max(1, min(len(configs), workers or default_workers()))
    reasons: dict[int, str] = {}

    def job(config: Config) -> Any:
        if _interrupted.is_set():
            raise _Interrupted
        return compile_one(config)

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dispatch-compile")
    with serial_parsing():
        try:
            futures = {pool.submit(job, config): i for i, config in enumerate(configs)}
            for future in concurrent.futures.as_completed(futures):
                i = futures[future]
                exc = future.exception()
                if isinstance(exc, (KeyboardInterrupt, _Interrupted)):
                    raise KeyboardInterrupt
                if exc is not None:
                    first = str(exc).strip().splitlines()
                    reasons[i] = f"compile error: {type(exc).__name__}: {first[0] if first else ''}"
                if progress is not None:
                    progress(configs[i], reasons.get(i))
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                interrupt()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    pool.shutdown(wait=True)
    compiled = [c for i, c in enumerate(configs) if i not in reasons]
    failures = [Failure(configs[i], reasons[i]) for i in sorted(reasons)]
    return CompileReport(compiled, failures, time.perf_counter() - start)
