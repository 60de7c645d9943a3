"""Settings for the whole suite.

The test projects define servers, hooks and allow rules, so every folder is
trusted (`TOOLKERNEL_TRUST_ALL`, see toolkernel/_trust.py), in this process
and in the kernels the tests start. The trust tests remove the variable
themselves. Trust records go to a private folder, never the machine's own.
"""

import os
import tempfile

os.environ["TOOLKERNEL_TRUST_ALL"] = "1"
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="toolkernel-test-state-")


import traceback

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep a failure's report when CPython 3.11 cannot parse its source.

    On 3.11.7, `ast.parse` can raise "AST constructor recursion depth mismatch"
    (python/cpython#106905, a shared counter that background threads formatting
    tracebacks also move). pytest parses each traceback entry's source to show
    it, so one such failure became an INTERNALERROR that hid the test that failed.
    The fallback lists the frames without parsing anything.
    """
    try:
        return (yield)
    except SystemError:
        frames = traceback.extract_tb(call.excinfo.tb)
        lines = [f'  File "{f.filename}", line {f.lineno}, in {f.name}\n    {f.line}\n' for f in frames]
        longrepr = "".join(lines) + f"{call.excinfo.typename}: {call.excinfo.value}"
        return pytest.TestReport(
            item.nodeid, item.location, dict.fromkeys(item.keywords, 1), "failed", longrepr,
            call.when, duration=call.duration, start=call.start, stop=call.stop,
            user_properties=item.user_properties,
        )


@pytest.fixture
def python_sigint():
    """SIGINT raises KeyboardInterrupt, as in a kernel, for the test's length. A process
    started in the background by a non-interactive shell (a CI job's `cmd &`) inherits
    SIGINT ignored, and then neither a real signal nor `_thread.interrupt_main` does anything."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
