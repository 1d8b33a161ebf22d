"""Op packages made in a test: ``dispatch.register(op_package(decl), name=...)``."""

from __future__ import annotations

import dispatch


def op_package(*decls):
    """An op package whose ``dispatch_ops`` declares ``decls``."""
    class Package:
        @dispatch.hookimpl
        def dispatch_ops(self):
            return list(decls)
    return Package()
