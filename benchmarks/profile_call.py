"""Where a dispatched call's host time goes, layer by layer, on the GPU.

For one shape (default bf16 softmax 1x4096) it times back-to-back calls (wall us per call) of:
torch.softmax; dispatch.softmax forced to each backend; the resolved function the dispatcher
keeps for that call (no key lookup); for Triton, the Launcher's run, its launch, the direct
launch and the compiled kernel's launcher called with prepacked arguments, and the JIT path;
the key expression alone. Then a cProfile of the forced calls. Prints and writes ``profile.txt``::

    python3 benchmarks/profile_call.py --out DIR [--shape 1x4096] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import time

import torch

import dispatch


def per_call(fn, calls: int = 2000, repeats: int = 7) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    best = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best.append((time.perf_counter() - t0) / calls * 1e6)
    best.sort()
    return best[len(best) // 2]


def static_experiment(d, x, out, say, lines) -> None:
    """Launch the same compiled kernel through torch's static CUDA launcher (Inductor's), if it loads."""
    try:
        import tempfile

        from torch._inductor.runtime.static_triton_launcher import StaticallyLaunchedCudaKernel

        compiled = d.kernel(x, out, *d.fixed, **d.tail, **d.options)
        if not hasattr(compiled, "_cubin_path"):
            compiled._cubin_path = None
        k = StaticallyLaunchedCudaKernel(compiled)
        path = tempfile.mktemp(suffix=".cubin")
        k.reload_cubin_from_raw(path)
        k.load_kernel(x.device.index or 0)
        names = list(d.jit_fn.arg_names)
        values = [x.data_ptr(), out.data_ptr(), *(t.data_ptr() for t in d.fixed)]
        values += [d.tail[n] for n in names[len(values):]]
        args = tuple(v for i, v in enumerate(values) if i not in set(k.full_constexprs))
        arg_tys = k.arg_tys + "O" * (int(k.has_global_scratch) + int(k.has_profile_scratch))
        args = args + (None,) * (len(arg_tys) - len(args))
        lines.append(f"  static launcher: arg_tys={arg_tys!r} args={args!r}")
        print(lines[-1])
        impl, fn_, gx, nw, sh = k.C_impl, k.function, d.grid[0], k.num_warps, k.shared
        stream = torch._C._cuda_getCurrentRawStream(0)
        out.zero_()
        impl._launch_kernel(fn_, gx, 1, 1, nw, sh, arg_tys, args, stream)
        ref = torch.softmax(x.float(), -1)
        ok = torch.allclose(out.float(), ref, atol=2e-2, rtol=2e-2)
        say(f"  torch static launcher (correct={ok})",
            per_call(lambda: impl._launch_kernel(fn_, gx, 1, 1, nw, sh, arg_tys, args, stream)))
        xs = x
        say("  torch static launcher + empty + data_ptr",
            per_call(lambda: impl._launch_kernel(fn_, gx, 1, 1, nw, sh, arg_tys,
                                                 (xs.data_ptr(), torch.empty_like(xs).data_ptr(), *args[2:]),
                                                 stream)))
    except Exception as exc:  # noqa: BLE001
        import traceback

        lines.append("  static launcher experiment failed: " + traceback.format_exc()[-1500:])
        print(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/profile")
    ap.add_argument("--shape", default="1x4096")
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    shape = tuple(int(s) for s in a.shape.split("x"))
    x = torch.randn(shape, device="cuda", dtype=getattr(torch, a.dtype))
    lines: list[str] = []

    def say(name, us):
        line = f"{name:60s} {us:8.2f} us"
        print(line, flush=True)
        lines.append(line)

    say("torch.softmax(x, -1)", per_call(lambda: torch.softmax(x, -1)))
    say("torch.empty_like(x)", per_call(lambda: torch.empty_like(x)))
    say("x.data_ptr()", per_call(lambda: x.data_ptr()))
    say("torch.cuda.is_current_stream_capturing()", per_call(torch.cuda.is_current_stream_capturing))
    fnobj = dispatch.op("softmax") if hasattr(dispatch, "op") else dispatch.softmax
    from dispatch._dispatcher import DISPATCHER

    opf = DISPATCHER.function("softmax")
    say("key expression (OpFunction.key)", per_call(lambda: opf.key(x, -1, None, backend=None)))
    for backend in ("torch", "tilelang", "triton"):
        try:
            y = dispatch.softmax(x, -1, backend=backend)
            torch.testing.assert_close(y.float(), torch.softmax(x.float(), -1), rtol=2e-2, atol=2e-3)
        except Exception as exc:  # noqa: BLE001
            say(f"{backend}: unavailable {type(exc).__name__}: {exc}"[:60], float("nan"))
            continue
        say(f"dispatch.softmax(x, -1, backend={backend!r})",
            per_call(lambda b=backend: dispatch.softmax(x, -1, backend=b)))
        key = opf.key(x, -1, None, backend=backend)
        fn = DISPATCHER.tables["softmax"][key]
        say(f"  resolved fn ({backend})", per_call(lambda f=fn: f(x)))
        inner = getattr(fn, "__wrapped__", None)
        if inner is not None:
            say(f"  unguarded kernel ({backend})", per_call(lambda f=inner: f(x)))
        launcher = getattr(inner, "launcher", None)
        if launcher is not None:
            out = torch.empty_like(x)
            say("  Launcher.launch(x, out)", per_call(lambda: launcher.launch(x, out)))
            for d in launcher.direct:
                lines.append(f"  direct state: {d.state} {d.why}")
                print(lines[-1])
            d = launcher.direct[0]
            if d.direct is not None:
                say("  DirectLaunch.direct(x, out)", per_call(lambda: d.direct(x, out)))
                say("  DirectLaunch._jit(x, out)", per_call(lambda: d._jit(x, out)))
                dc = {n: c.cell_contents for n, c in zip(d.direct.__code__.co_freevars, d.direct.__closure__)}
                run, function, packed, t = dc["run"], dc["function"], dc["packed"], dc["tail"]
                g0, g1, g2 = dc["g0"], dc["g1"], dc["g2"]
                stream = torch._C._cuda_getCurrentRawStream(0)
                xp, op_ = x.data_ptr(), out.data_ptr()
                say("  compiled.run(...) prepacked, int pointers",
                    per_call(lambda: run(g0, g1, g2, stream, function, packed, None, None, None, xp, op_, *t)))
                lines.append(f"  launcher: {type(run).__module__}.{type(run).__qualname__}; args after x, out: {len(t)}")
                print(lines[-1])
                launch_c = getattr(run, "launch", None)
                if launch_c is not None:
                    import inspect
                    try:
                        lines.append("  CudaLauncher.__call__ source:\n" + inspect.getsource(type(run).__call__))
                    except Exception as exc:  # noqa: BLE001
                        lines.append(f"  no source: {exc}")
                    print(lines[-1])
                static_experiment(d, x, out, say, lines)
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(3000):
            dispatch.softmax(x, -1, backend=backend)
        torch.cuda.synchronize()
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
        lines.append(f"--- cProfile, 3000 calls, backend={backend}\n{s.getvalue()}")
        print(lines[-1])
    # the same calls after torch.compile has compiled (and run) a function in this process
    compiled = torch.compile(lambda t: torch.softmax(t, -1))
    compiled(x)
    try:
        import triton

        rt = triton.knobs.runtime
        lines.append(f"after torch.compile: triton launch hooks enter={rt.launch_enter_hook!r} "
                     f"exit={rt.launch_exit_hook!r}")
    except Exception as exc:  # noqa: BLE001
        lines.append(f"after torch.compile: hooks unreadable ({exc})")
    print(lines[-1])
    say("after torch.compile: torch.softmax(x, -1)", per_call(lambda: torch.softmax(x, -1)))
    for backend in ("torch", "tilelang", "triton"):
        try:
            say(f"after torch.compile: dispatch.softmax(backend={backend!r})",
                per_call(lambda b=backend: dispatch.softmax(x, -1, backend=b)))
        except Exception as exc:  # noqa: BLE001
            lines.append(f"after torch.compile: {backend}: {type(exc).__name__}: {exc}")
    with open(os.path.join(a.out, "profile.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    del fnobj


if __name__ == "__main__":
    main()
