"""What the sm_90 compile tests' scripts start with: ``build(fn, ptrs, consts, warps)`` compiles a
Triton kernel for sm_90 without a GPU.

Every constexpr the kernel declares is a constexpr there (its default where the case names none: one
left out of the signature would be built as an int argument, a program no launch compiles); ints the
case names (``M=1``) are constants too, as Triton passes an int argument equal to 1. Pointers take
their types from ``ptrs``, ``eps`` is fp32, other ints i32."""

import textwrap

BUILD = textwrap.dedent("""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    def build(fn, ptrs, consts, warps=4):
        consts = {**{p.name: p.default for p in fn.params if p.is_constexpr and p.has_default}, **consts}
        missing = [p.name for p in fn.params if p.is_constexpr and p.name not in consts]
        assert not missing, f"{fn.__name__}: constexprs without a value: {missing}"
        sig = {a: "constexpr" if a in consts else ptrs.get(a, "fp32" if a == "eps" else "i32")
               for a in fn.arg_names}
        triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": warps})
""")
