"""Shared by the package's tests: fresh random seeds that a failure prints, and bf16 test data that
products compute exactly.

Run: `python3 -m pytest python/tests` (CPU world, numpy; no torch or GPU needed). The torch tests
(test_torch.py) run on a GPU under torchrun: `torchrun --nproc-per-node 1 -m pytest python/tests`
(bench/torch_run.sh does that on the device). Every skip prints its reason (-rs in pyproject.toml).
"""
import os

import pytest


@pytest.fixture
def seed(request):
    """A fresh seed per test, printed in the report when the test fails."""
    value = int.from_bytes(os.urandom(4), "little")
    request.node.user_properties.append(("seed", value))
    return value


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.failed:
        for name, value in item.user_properties:
            if name == "seed":
                report.sections.append(("seed", f"this test's fresh random seed was {value}"))
