"""dispatch's pytest plugin: a ``dispatch_backend`` fixture, ``--dispatch-backend``, and the conformance kit.

Loaded by pytest through the ``pytest11`` entry point ``dispatch``. The hooks live in
:mod:`dispatch_pytest.plugin`; the kit (``certify``, ``conformance_tests``) in
:mod:`dispatch_pytest.conformance`, its cases in :mod:`dispatch_pytest.cases`.
"""

try:
    import pytest  # noqa: F401  (the hooks need pytest; certify() does not)
except ModuleNotFoundError:  # pytest absent: no pytest run will load the hooks either
    __all__: list[str] = []
else:
    from .plugin import (dispatch_backend, pytest_addoption, pytest_collection_modifyitems, pytest_configure,
                         pytest_generate_tests, pytest_report_header)

    __all__ = ["dispatch_backend", "pytest_addoption", "pytest_collection_modifyitems", "pytest_configure",
               "pytest_generate_tests", "pytest_report_header"]
