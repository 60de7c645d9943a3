"""Settings for the whole suite.

The test projects define servers, hooks and allow rules, so every folder is
trusted (`TOOLKERNEL_TRUST_ALL`, see toolkernel/_trust.py), in this process
and in the kernels the tests start. The trust tests remove the variable
themselves. Trust records go to a private folder, never the machine's own
(one per process: each xdist worker has its own).

The suite runs on pytest-xdist workers (`-n auto` in pyproject.toml). Most
tests wait on kernels, servers and a browser rather than use a core, so `auto`
is more workers than cores (`auto_num_workers`), and the tests of a module that
share a module-scoped fixture run on one worker, so that it is made once
(`pytest_xdist_make_scheduler`). `-m "not slow"` leaves out the
tests of real browsers, Jupyter Servers and long kernel runs. The fixture MCP
servers start as forks of one process that has imported `mcp` (tests/servers/_zygote.py):
about 400 starts a run, at 0.7 s of CPU each otherwise.
"""

import atexit
import functools
import os
import re
import shutil
import tempfile
from pathlib import Path

os.environ["TOOLKERNEL_TRUST_ALL"] = "1"
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="toolkernel-test-state-")
atexit.register(shutil.rmtree, os.environ["XDG_STATE_HOME"], ignore_errors=True)  # one per worker was left


import traceback

import pytest

TESTS = Path(__file__).resolve().parent
WORKERS_PER_CORE = 2.5  # 5 on 2 cores: the tests mostly wait on child processes (a serial run used 24% of a core)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: PYTEST_XDIST_AUTO_NUM_WORKERS when set, else WORKERS_PER_CORE per core; one per core
    for `-m "not slow"`, whose tests compute rather than wait (each worker collects the whole suite)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "").isdigit():
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    cores = len(os.sched_getaffinity(0))
    if re.fullmatch(r"\s*not\s+slow\s*", config.option.markexpr or ""):
        return cores
    return max(2, round(WORKERS_PER_CORE * cores))


# Fixtures that start a real kernel, Jupyter Server or browser: a test that uses one is `slow`
# whichever test of its module pays for the start (module-scoped, in random order).
SLOW_FIXTURES = frozenset({"kernel", "start_kernel", "outside_kernel", "paired", "jupyter_server", "collab_server",
                           "gateway_server", "new_ports_server", "slow_start_server", "lab", "browser_ready"})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Before `-m` selects: the tests of SLOW_FIXTURES are `slow` (others are marked where they are)."""
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def pytest_configure(config):
    """One fork server for the fixture MCP servers of the whole run (tests/servers/_zygote.py),
    started by the process that runs or hands out the tests, not by each xdist worker; and this
    tree's bytecode, compiled once for the run's processes (`_compile_tree`), and the test
    modules as pytest rewrites them, once for the workers (`_rewrite_test_modules`)."""
    if not hasattr(config, "workerinput"):
        _compile_tree()
        _rewrite_test_modules(config)
        config._zygote = _start_zygote()


def _compile_tree() -> None:
    """Write the bytecode of toolkernel/ and tests/ before the workers start.

    The run starts hundreds of Python processes that import this tree (serve, kernels, the
    fixture servers, each worker), through PYTHONPATH, not the installed copy pip compiled. Where
    PYTHONDONTWRITEBYTECODE is set (many CI images and containers, this machine's included), no
    process writes what it compiled, so each compiled toolkernel again: 0.35 s of CPU a start,
    minutes of a suite that is CPU-bound on 2 cores. compileall writes whatever that variable says,
    and the processes still read it; 0.6 s once, next to nothing when it is up to date."""
    import compileall

    for folder in (TESTS.parent / "toolkernel", TESTS):
        compileall.compile_dir(folder, quiet=2)  # silent: a tree it cannot write is only slower


def _rewrite_test_modules(config) -> None:
    """Write pytest's cache of the test modules with their asserts rewritten, before the workers start.

    Each xdist worker imports every test module, rewritten so that a failing assert shows its
    values, and pytest keeps the result beside the bytecode, except where PYTHONDONTWRITEBYTECODE
    is set: there each of the 5 workers rewrote the whole suite again, 4.7 s of CPU apiece. The
    workers read the cache whatever that variable says. pytest has no public way to write it, so
    this uses its own internal functions; where they are gone or changed, nothing is written and
    the workers rewrite as before."""
    try:
        from _pytest.assertion.rewrite import (PYC_TAIL, _read_pyc, _rewrite_test, _write_pyc, assertstate_key,
                                               get_cache_dir)

        if config.getoption("assertmode") != "rewrite" or getattr(config.option, "dist", "no") == "no":
            return  # without workers, this process rewrites what it imports, as ever
        state = config.stash[assertstate_key]
        for path in sorted(TESTS.rglob("*.py")):
            if not (path.name.startswith("test_") or path.name == "conftest.py"):
                continue  # pytest rewrites test modules and conftest files (the default `python_files`)
            cache = get_cache_dir(path)
            pyc = cache / (path.name[:-3] + PYC_TAIL)
            if _read_pyc(path, pyc, state.trace) is None:
                cache.mkdir(parents=True, exist_ok=True)
                source_hash, code = _rewrite_test(path, config)
                _write_pyc(state, code, source_hash, pyc)
    except (ImportError, AttributeError, TypeError, KeyError, OSError, ValueError):
        return  # only slower: each worker rewrites what it imports


def pytest_unconfigure(config):
    zygote = getattr(config, "_zygote", None)
    if zygote is not None:
        zygote.kill()
        zygote.wait()


def _start_zygote() -> "subprocess.Popen | None":
    """The fork server, once it listens; None when it cannot (the fixtures then import mcp themselves)."""
    import subprocess
    import sys

    read, write = os.pipe()
    process = subprocess.Popen([sys.executable, str(TESTS / "servers" / "_zygote.py"), "--serve", str(write)],
                               pass_fds=(write,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    os.close(write)
    with os.fdopen(read, "rb") as said:
        if said.readline() == b"ready\n":
            return process
    process.kill()
    process.wait()
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """The tests of a module that shares a module-scoped fixture run on one worker, which makes the
    fixture once; every other test goes to whichever worker is free. (xdist's own loadgroup marks
    do not reach its scheduler under pytest 9.2, whose node ids moved.)"""
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixturesScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if _shares_fixtures(config.rootpath, module) else nodeid

    return SharedFixturesScheduling(config, log)


SHARED_SCOPE = re.compile(r"""scope\s*=\s*["'](module|class|package)["']""")


@functools.cache
def _shares_fixtures(root: Path, module: str) -> bool:
    """Whether the test file, or a conftest.py of the suite above it, defines a fixture made once per
    module or class (a kernel, a server, a browser, a session read by many tests)."""
    path = root / module
    files = [path] + [folder / "conftest.py" for folder in path.parents if folder.is_relative_to(TESTS)]
    return any(SHARED_SCOPE.search(_text(file)) for file in files)


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


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
