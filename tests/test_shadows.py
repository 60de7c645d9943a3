"""A module a script leaves at the workspace's top in place of an installed one is moved
aside when its run ends (see toolkernel/_runners/_shadows.py).

Every run here is a real Bashkit run through `Session.run_script`. What a real Python
started in the workspace would import is asked of a real Python (`imported_from`), so that
"shadows" and "shadows nothing" are importlib's answers, not this module's.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kernel_helpers import Kernel, RecordingSink, isolated_env, loaded_kernel, write_config
from toolkernel import tool
from toolkernel._session import Session

pytestmark = pytest.mark.timeout(300)

QUARANTINE = ".toolkernel/quarantine"
PLANT = "import pathlib; pathlib.Path(%r).write_text('pwned')\n"
# Installed wherever toolkernel is: json in the standard library, jsonschema a dependency.
PACKAGE = "jsonschema"


@pytest.fixture
def work(tmp_path, monkeypatch):
    for key, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


@pytest.fixture
def session(work):
    opened = Session(work)
    yield opened
    opened.close()


def run(session: Session, script: str):
    sink = RecordingSink()
    result = session.run_script(script, sink)
    return result, sink


def last_line(sink: RecordingSink) -> str:
    return sink.stderr_text.strip().splitlines()[-1]


def quarantined(work: Path) -> dict[str, Path]:
    """Each entry moved aside, by name, wherever its run's folder is."""
    root = work / QUARANTINE
    return {entry.name: entry for folder in (root.iterdir() if root.exists() else ()) for entry in folder.iterdir()}


def imported_from(work: Path, module: str) -> str:
    """Where a Python started in `work` finds `module` (its working directory first, as a kernel)."""
    code = f"import importlib.util; print(importlib.util.find_spec({module!r}).origin)"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSAFEPATH", "PYTHONPATH")}
    found = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True,
                           check=True)
    return found.stdout.strip()


def is_installed(work: Path, module: str) -> bool:
    return not imported_from(work, module).startswith(str(work))


# -- what is moved ------------------------------------------------------------------------


def test_a_module_and_a_package_that_shadow_installed_ones_are_moved_aside_whole(session, work):
    script = (f"printf {PLANT % 'pwned'!r} > json.py\n"
              f"mkdir {PACKAGE}; printf {PLANT % 'pwned'!r} > {PACKAGE}/__init__.py; echo data > {PACKAGE}/x.csv\n"
              "echo done")
    result, sink = run(session, script)
    assert sink.stdout_text == "done\n"
    assert result.exit_code != 0
    assert not (work / "json.py").exists() and not (work / PACKAGE).exists()
    moved = quarantined(work)
    assert (moved["json.py"]).read_text() == PLANT % "pwned"
    assert (moved[PACKAGE] / "__init__.py").read_text() == PLANT % "pwned"
    assert (moved[PACKAGE] / "x.csv").read_text() == "data\n"
    module, package = sink.stderr_text.strip().splitlines()[-2:]  # the last lines, by name
    assert module.startswith("toolkernel: moved json.py, written while this script ran, to .toolkernel/quarantine/")
    assert module.endswith("/json.py: a Python started in this folder imports it instead of the installed json."
                           " Move it back if you meant it.")
    assert package.startswith(f"toolkernel: moved the folder {PACKAGE}/, written while this script ran, to")
    assert package.endswith(f"/{PACKAGE}: a Python started in this folder imports it instead of the installed"
                            f" {PACKAGE}. Move it back if you meant it.")
    assert is_installed(work, "json") and is_installed(work, PACKAGE)


@pytest.mark.parametrize("name", ["json.pyc", "json.abi3.so", f"json{__import__('sysconfig').get_config_var('EXT_SUFFIX')}"])
def test_bytecode_and_extension_forms_count_too(session, work, name):
    result, sink = run(session, f"printf 'not really' > '{name}'")
    assert result.exit_code != 0 and name in quarantined(work)
    assert not (work / name).exists()


def test_a_package_made_of_bytecode_alone_counts(session, work):
    result, sink = run(session, f"mkdir {PACKAGE}; printf 'x' > {PACKAGE}/__init__.pyc")
    assert result.exit_code != 0 and PACKAGE in quarantined(work)


def test_a_bare_folder_a_namespace_package_takes_in_is_moved(session, work, tmp_path, monkeypatch):
    # A folder with no __init__ joins an installed namespace package of its name, first:
    # `import space.sub` then runs the workspace's `space/sub/__init__.py`.
    outside = tmp_path / "site"
    (outside / "space" / "real").mkdir(parents=True)
    (outside / "space" / "real" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(outside))
    result, sink = run(session, f"mkdir -p space/sub; printf {PLANT % 'pwned'!r} > space/sub/__init__.py")
    assert result.exit_code != 0 and "space" in quarantined(work)
    assert "ahead of the installed namespace package space" in last_line(sink)


# -- what is left alone ----------------------------------------------------------------
# Each run also writes `csv.py`, which is moved: the rest is left alone by a check that ran.

CONTROL = "; printf x > csv.py"


def left_alone(result, sink, work: Path) -> None:
    assert result.exit_code != 0 and set(quarantined(work)) == {"csv.py"}, sink.stderr_text
    assert len(sink.stderr_text.strip().splitlines()) == 1 and last_line(sink).startswith("toolkernel: moved csv.py")


def test_a_module_that_shadows_nothing_is_left_alone_and_alone_the_run_succeeds(session, work):
    script = "printf 'def f(): return 1\\n' > helpers.py; mkdir mylib; touch mylib/__init__.py"
    result, sink = run(session, script)
    assert result.exit_code == 0 and sink.stderr_text == "" and not (work / QUARANTINE).exists()
    result, sink = run(session, script.replace(">", ">>").replace("mkdir", "mkdir -p") + CONTROL)
    left_alone(result, sink, work)
    assert (work / "helpers.py").exists() and (work / "mylib" / "__init__.py").exists()


def test_a_bare_folder_named_after_a_regular_package_is_left_alone(session, work):
    # A folder without __init__ is a namespace portion: a regular package found later wins.
    result, sink = run(session, f"mkdir {PACKAGE} json; echo 1 > {PACKAGE}/data.csv; echo 2 > json/a.json" + CONTROL)
    left_alone(result, sink, work)
    assert (work / PACKAGE / "data.csv").exists() and (work / "json" / "a.json").exists()
    assert is_installed(work, PACKAGE) and is_installed(work, "json")


@pytest.mark.parametrize("name", ["JSON.py", "json.py.", "json.py ", " json.py", "json.PY", "json.txt", "json",
                                  "json.py.bak", "json-1.py", "json.so.1"])
def test_names_python_does_not_import_are_left_alone(session, work, name):
    # Judged by the name as it lies in the folder, as importlib compares it (exactly, on Linux).
    if sys.platform.startswith(("win", "darwin", "cygwin")):
        pytest.skip("names are compared folded where importlib may fold them")
    result, sink = run(session, f"printf 'x' > '{name}'" + CONTROL)
    left_alone(result, sink, work)
    assert (work / name).exists() and is_installed(work, "json")


def test_an_odd_name_is_escaped_in_the_line(work, tmp_path, monkeypatch):
    # Bashkit refuses control and bidi characters in a path; a tool (host code) the run calls
    # does not. The line shows such a name escaped, so it reads as it lies in the folder.
    odd = "odd\u202e\x1bname"
    outside = tmp_path / "site"
    outside.mkdir()
    (outside / f"{odd}.py").write_text("")
    monkeypatch.syspath_prepend(str(outside))

    @tool("plant", description="Writes a module.", kind="read", input_schema={"type": "object"})
    def plant(arguments, ctx):
        (work / f"{odd}.py").write_text("x")
        return "planted"

    session = Session(work)
    session.register_tools([plant])
    try:
        result, sink = run(session, "tools plant")
    finally:
        session.close()
    assert result.exit_code != 0 and f"{odd}.py" in quarantined(work), sink.stderr_text
    assert "moved odd\\u202e\\x1bname.py, written" in last_line(sink)
    assert "\u202e" not in sink.stderr_text and "\x1b" not in sink.stderr_text


def test_a_file_the_person_had_is_left_alone_when_the_run_does_not_touch_it(session, work):
    (work / "json.py").write_text("the person's own\n")
    (work / PACKAGE).mkdir()
    (work / PACKAGE / "__init__.py").write_text("the person's own\n")
    result, sink = run(session, f"cat json.py; echo more > {PACKAGE}/notes.txt; echo other > other.txt" + CONTROL)
    left_alone(result, sink, work)
    assert (work / "json.py").read_text() == "the person's own\n"
    assert (work / PACKAGE / "__init__.py").read_text() == "the person's own\n"


# -- what the run changed of the person's ----------------------------------------------------


@pytest.mark.parametrize("script", [
    "printf 'evil\\n' > json.py",                                      # rewritten in place, same size
    "printf 'evil\\n' > json.py; touch -d '2020-09-13 12:26:40' json.py",  # and its mtime set back
    "mv json.py old.py; printf 'evil\\n' > json.py",                   # replaced by a new file
    "rm json.py; mkdir json; printf 'evil\\n' > json/__init__.py",     # a file replaced by a package
])
def test_a_shadowing_file_the_person_had_that_the_run_changed_is_moved(session, work, script):
    (work / "json.py").write_text("mine\n")
    os.utime(work / "json.py", ns=(1_600_000_000_000_000_000,) * 2)
    result, sink = run(session, script)
    assert result.exit_code != 0 and not (work / "json.py").exists() and not (work / "json").exists()
    moved = quarantined(work)
    assert set(moved) == {"json"} if "mkdir" in script else set(moved) == {"json.py"}
    if "mv" in script:
        assert (work / "old.py").read_text() == "mine\n"  # shadows nothing: left where the run put it


def test_the_persons_package_whose_init_the_run_rewrote_is_moved(session, work):
    (work / PACKAGE).mkdir()
    (work / PACKAGE / "__init__.py").write_text("mine\n")
    result, sink = run(session, f"printf 'evil\\n' > {PACKAGE}/__init__.py")
    assert result.exit_code != 0
    assert (quarantined(work)[PACKAGE] / "__init__.py").read_text() == "evil\n"


def test_the_persons_bare_folder_the_run_made_a_package_is_moved(session, work):
    (work / PACKAGE).mkdir()
    (work / PACKAGE / "data.csv").write_text("1\n")
    result, sink = run(session, f"touch {PACKAGE}/__init__.py")
    assert result.exit_code != 0
    assert (quarantined(work)[PACKAGE] / "data.csv").read_text() == "1\n"


def test_a_package_replaced_by_a_plain_file_is_left_alone(session, work):
    (work / "json").mkdir()
    (work / "json" / "__init__.py").write_text("mine\n")
    result, sink = run(session, "rm -rf json; printf 'not python' > json" + CONTROL)
    left_alone(result, sink, work)
    assert (work / "json").read_text() == "not python"


# -- every way a run ends ------------------------------------------------------------------


def test_a_run_a_call_stops_is_checked(session, work):
    # A call built at run time that needs approval stops the script there (no one to ask).
    result, sink = run(session, "printf 'x' > json.py; p=out.txt; tools write-file path=$p content=y; echo after")
    assert result.run_report is not None and result.run_report.stopped is not None
    assert "after" not in sink.stdout_text and "json.py" in quarantined(work)
    assert last_line(sink).startswith("toolkernel: moved json.py")


def test_a_failing_script_keeps_its_exit_code_and_is_checked(session, work):
    result, sink = run(session, "printf 'x' > json.py; exit 7")
    assert result.exit_code == 7 and "json.py" in quarantined(work)


@pytest.mark.slow
def test_a_run_ended_by_its_timeout_is_checked_and_says_so_last(work):
    @tool("doze", description="Waits a minute.", kind="read", input_schema={"type": "object"})
    async def doze(arguments, ctx):
        await asyncio.sleep(60)
        return "woke"

    write_config(work, "[shell]\ntimeout = 2\n")
    session = Session(work)
    session.register_tools([doze])
    try:
        result, sink = run(session, "printf 'x' > json.py; tools doze; echo after")
    finally:
        session.close()
    assert result.exit_code != 0 and "timeout" in sink.stderr_text
    assert "json.py" in quarantined(work) and last_line(sink).startswith("toolkernel: moved json.py")


def test_an_interrupted_run_is_checked(work, python_sigint):
    import _thread

    started = threading.Event()

    @tool("hang", description="Waits a minute.", kind="read", input_schema={"type": "object"})
    async def hang(arguments, ctx):
        started.set()
        await asyncio.sleep(60)
        return "woke"

    session = Session(work)
    session.register_tools([hang])
    threading.Thread(target=lambda: started.wait(60) and _thread.interrupt_main(), daemon=True).start()
    try:
        result, sink = run(session, "printf 'x' > json.py; tools hang; echo after")
    finally:
        session.close()
    assert result.interrupted and result.exit_code == 130
    assert "json.py" in quarantined(work) and last_line(sink).startswith("toolkernel: moved json.py")


def test_a_run_that_goes_on_after_the_cell_returned_is_checked_then_and_at_its_end(work, python_sigint):
    # A sync tool that never looks at the cancel keeps the script's thread past the interrupt's
    # grace: the cell returns, having looked once; what the run leaves after that is moved when
    # it really ends.
    import _thread

    started, release = threading.Event(), threading.Event()

    @tool("stuck", description="Waits, then writes a module.", kind="read", input_schema={"type": "object"})
    def stuck(arguments, ctx):
        started.set()
        release.wait(60)
        (work / "csv.py").write_text("late\n")
        return "released"

    session = Session(work)
    session.register_tools([stuck])
    threading.Thread(target=lambda: started.wait(60) and _thread.interrupt_main(), daemon=True).start()
    try:
        result, sink = run(session, "printf 'x' > json.py; for i in 1; do tools stuck; done")
        assert result.interrupted and "json.py" in quarantined(work)
        assert last_line(sink).startswith("toolkernel: moved json.py")
        release.set()
        deadline = time.monotonic() + 60
        while "csv.py" not in quarantined(work) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        release.set()
        session.close()
    assert "csv.py" in quarantined(work) and not (work / "csv.py").exists()
    assert "moved csv.py" in sink.stderr_text  # said late, through the cell's sink


# -- the quarantine itself ------------------------------------------------------------------


def test_a_link_where_the_quarantine_goes_fails_the_run_and_nothing_goes_through_it(session, work, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (work / ".toolkernel").mkdir(exist_ok=True)
    (work / ".toolkernel" / "quarantine").symlink_to(elsewhere)
    result, sink = run(session, "printf 'x' > json.py")
    assert result.exit_code != 0 and list(elsewhere.iterdir()) == []
    last = last_line(sink)
    assert last.startswith("toolkernel: could not move json.py, written while this script ran, out of the way (")
    assert "is a link or a file, not a folder" in last and last.endswith("Remove it.")
    assert (work / "json.py").read_text() == "x"  # still there, as the line says


def test_many_entries_are_said_in_one_line_and_the_rest_left(session, work):
    names = ["json", "csv", "random", "string", "typing", "shutil", "pathlib"]
    script = ("for i in $(seq 2000); do : > f$i.txt; done\n"
              + "".join(f"printf x > {name}.py\n" for name in names))
    result, sink = run(session, script)
    assert result.exit_code != 0
    assert set(quarantined(work)) == {f"{name}.py" for name in names}
    assert len(list(work.glob("f*.txt"))) == 2000
    last = last_line(sink)
    assert last.startswith("toolkernel: moved 7 entries written while this script ran (") and " and 4 more" in last
    assert len(sink.stderr_text.strip().splitlines()) == 1


# -- a real kernel -----------------------------------------------------------------------------


def _fresh_import(work: Path, module: str) -> str:
    """Where `import module` comes from in a kernel started now in `work`, as its first cell,
    before toolkernel is loaded (a restart, then Run All)."""
    kernel = Kernel(work, {**isolated_env(work.parent), "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        run = kernel.execute_ok(f"import {module}; print({module}.__file__)")
        return run.stdout.strip().splitlines()[-1]
    finally:
        kernel.shutdown()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_restarted_kernel_imports_the_installed_module_not_the_planted_one(work):
    plant = PLANT % str(work.parent / "pwned")
    with loaded_kernel(work) as kernel:
        planting = kernel.execute(f"%%tools\nprintf {plant!r} > {PACKAGE}.py\necho planted")
    where = _fresh_import(work, PACKAGE)
    assert not (work.parent / "pwned").exists() and not where.startswith(str(work)), where
    assert "planted" in planting.stdout and planting.status == "error"
    assert f"toolkernel: moved {PACKAGE}.py, written while this script ran" in planting.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_kernel_restarted_while_the_script_runs_moves_what_it_wrote(work):
    # A person restarts a kernel whose script hangs: the kernel exits normally (atexit), and the
    # script's plant must not be there for the next kernel's first import.
    plant = PLANT % str(work.parent / "pwned")
    with loaded_kernel(work) as kernel:
        kernel.start(f"%%tools\nprintf {plant!r} > {PACKAGE}.py\nsleep 600")
        deadline = time.monotonic() + 60
        while not (work / f"{PACKAGE}.py").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (work / f"{PACKAGE}.py").exists()
        kernel.manager.restart_kernel(now=False)  # returns once the old kernel has exited
    where = _fresh_import(work, PACKAGE)
    assert not (work.parent / "pwned").exists() and not where.startswith(str(work)), where
    assert f"{PACKAGE}.py" in quarantined(work)


def test_a_top_that_cannot_be_looked_at_after_the_run_fails_it_saying_so(work, tmp_path):
    # A tool (host code) swaps the workspace for a link: nothing is followed, and the run says
    # the top could not be looked at rather than passing as clean.
    moved_away = tmp_path / "moved-away"

    @tool("swap", description="Swaps the workspace for a link.", kind="read", input_schema={"type": "object"})
    def swap(arguments, ctx):
        os.rename(work, moved_away)
        os.symlink(moved_away, work)
        (moved_away / "json.py").write_text("x")
        return "swapped"

    session = Session(work)
    session.register_tools([swap])
    try:
        result, sink = run(session, "tools swap")
    finally:
        session.close()
    assert result.exit_code != 0
    assert last_line(sink).startswith("toolkernel: could not look at the workspace's top after this script ran (")
    assert (moved_away / "json.py").exists() and not (moved_away / QUARANTINE).exists()


def test_a_name_an_editable_install_maps_counts_but_not_one_it_maps_to_the_workspace(work, tmp_path, monkeypatch):
    # setuptools' editable installs: a finder appended to sys.meta_path, after PathFinder, whose
    # module maps names to folders. One elsewhere is shadowed by the workspace; one at the
    # workspace's top is the person's own package, which they and their scripts edit.
    import types

    finder_module = types.ModuleType("__editable___tk_finder")
    finder_module.MAPPING = {"tkelsewhere": str(tmp_path / "src" / "tkelsewhere"), "tkhere": str(work / "tkhere")}

    class _EditableFinder:
        @classmethod
        def find_spec(cls, fullname, path=None, target=None):
            return None

    _EditableFinder.__module__ = finder_module.__name__
    monkeypatch.setitem(sys.modules, finder_module.__name__, finder_module)
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, _EditableFinder])
    (work / "tkhere").mkdir()
    (work / "tkhere" / "__init__.py").write_text("the person's\n")
    session = Session(work)
    try:
        result, sink = run(session, "printf x > tkelsewhere.py; printf 'edited\\n' > tkhere/__init__.py")
    finally:
        session.close()
    assert set(quarantined(work)) == {"tkelsewhere.py"}, sink.stderr_text
    assert (work / "tkhere" / "__init__.py").read_text() == "edited\n"


# -- bytecode beside the person's own modules ----------------------------------------------


def _poisoned_bytecode(source: Path, marker: Path) -> bytes:
    """A `.pyc` for `source` whose header says it is current (the source's mtime and size, which a
    script sees too) and whose code writes `marker`."""
    import importlib._bootstrap_external as external

    info = source.stat()
    code = compile(PLANT % str(marker), str(source), "exec")
    return bytes(external._code_to_timestamp_pyc(code, int(info.st_mtime), info.st_size))


def _cache_bytecode(work: Path, module: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-c", f"import {module}"], cwd=work, env=env, check=True)


def test_bytecode_a_script_writes_for_the_persons_module_is_moved_aside(session, work):
    helpers = work / "helpers.py"
    helpers.write_text("VALUE = 'source'\n")
    _cache_bytecode(work, "helpers")  # a cache of Python's own
    cached = next((work / "__pycache__").iterdir())
    marker = work.parent / "pwned"
    import base64

    poisoned = base64.b64encode(_poisoned_bytecode(helpers, marker)).decode()
    result, sink = run(session, f"printf '%s' {poisoned} | base64 -d > __pycache__/{cached.name}")
    assert result.exit_code != 0
    assert "__pycache__/" in last_line(sink) and "bytecode" in last_line(sink)
    assert quarantined(work)["__pycache__"].is_dir() and not (work / "__pycache__").exists()
    value = subprocess.run([sys.executable, "-c", "import helpers; print(helpers.VALUE)"], cwd=work,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert value == "source" and not marker.exists()


def test_bytecode_a_run_does_not_touch_is_left_alone(session, work):
    (work / "helpers.py").write_text("VALUE = 1\n")
    _cache_bytecode(work, "helpers")
    result, sink = run(session, "ls __pycache__ > /dev/null; echo done")
    assert result.exit_code == 0 and sink.stdout_text == "done\n", sink.stderr_text
    assert (work / "__pycache__").is_dir() and not (work / QUARANTINE).exists()


def test_a_repository_made_where_one_was_is_new_and_the_one_moved_with_its_folder_is_not(tmp_path):
    """Repositories are known by identity: the run's end moves a `.git` made at the path of one that
    was there (its folder renamed away meanwhile), not the person's, now at the renamed path; and a
    folder made a gitdir by its entries (HEAD, objects, refs) loses its new HEAD."""
    from toolkernel._runners._shadows import Watch

    work = tmp_path / "w"
    subprocess.run(["git", "init", "-q", str(work / "app")], check=True)
    watch = Watch(work, deep=())
    watch.start()
    (work / "app").rename(work / "app-old")
    subprocess.run(["git", "init", "-q", str(work / "app")], check=True)
    (work / "data" / "objects").mkdir(parents=True)
    (work / "data" / "refs").mkdir()
    (work / "data" / "HEAD").write_text("ref: refs/heads/main\n")
    moved = {m.name: m.kind for m in watch.end() if m.to is not None}
    assert moved == {"app/.git": "git", "data/HEAD": "git"}
    assert (work / "app-old" / ".git").is_dir() and not (work / "app" / ".git").exists()
