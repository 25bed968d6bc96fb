"""The Python suite runs against the build tree (PYTHONPATH=build/<preset>/python,
set by CTest). STRATA_TEST_DEVICE, as for the C++ suites, names the device
the device-generic tests use (cpu:0 by default)."""
import os

import pytest


@pytest.fixture
def device():
    return os.environ.get("STRATA_TEST_DEVICE", "cpu:0")


# A file whose every test skipped (an optional peer missing: PyTorch, JAX)
# ends with this code, which CTest's SKIP_RETURN_CODE reports as skipped:
# pytest's own 0 would count it as passed.
SKIPPED_RUN = 77


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    # 5: no test collected, as when a module-level importorskip skipped the file.
    if reporter is None or exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        return
    ran = sum(len(reporter.stats.get(kind, [])) for kind in ("passed", "failed", "error", "xfailed", "xpassed"))
    if ran == 0 and reporter.stats.get("skipped"):
        session.exitstatus = SKIPPED_RUN
