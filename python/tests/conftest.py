"""The Python suite runs against the build tree (PYTHONPATH=build/<preset>/python,
set by CTest). STRATA_TEST_DEVICE, as for the C++ suites, names the device
the device-generic tests use (cpu:0 by default)."""
import os

import pytest


@pytest.fixture
def device():
    return os.environ.get("STRATA_TEST_DEVICE", "cpu:0")
