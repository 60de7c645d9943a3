"""Rewind in real kernels and real processes (issue 38): the README's journey, an interrupt, a kill,
`toolkernel changes|rewind` as a command, an agent's `tools rewind` asking as a write."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernel_helpers import Kernel, RecordingSink, isolated_env, project_with, write_config

from toolkernel._journal import Journal


def _env(tmp: Path) -> dict[str, str]:
    return {**isolated_env(tmp), "XDG_STATE_HOME": str(tmp / "state"), "PYTHONPATH": os.pathsep.join(sys.path)}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("rewind")
    work = root / "work"
    work.mkdir()
    write_config(work, '[policy]\nmode = "accept-edits"\n')
    return work


@pytest.fixture(scope="module")
def kernel(project):
    k = Kernel(project, _env(project.parent))
    try:
        k.execute_ok("%load_ext toolkernel")
        yield k
    finally:
        k.shutdown()


def _build(project: Path) -> None:
    (project / "build" / "lib").mkdir(parents=True, exist_ok=True)
    (project / "build" / "lib" / "model.pkl").write_bytes(os.urandom(3000))
    (project / "build" / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(project / "build" / "run.sh", 0o755)


def _snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mode) for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_a_folder_deleted_by_mistake_is_listed_and_rewound_in_a_kernel(kernel, project):
    _build(project)
    before = _snapshot(project / "build")
    kernel.execute_ok("%%tools\nrm -rf build\necho cleaned")
    listed = kernel.execute_ok("%tools changes").stdout
    assert "deleted   build/lib/model.pkl  (after the fact)" in listed and " cell " in listed
    done = kernel.execute_ok("%tools rewind --last").stdout
    assert "rewound run" in done and "build/run.sh" in done
    assert _snapshot(project / "build") == before


def test_rewind_of_a_file_changed_since_is_refused_then_forced_then_undone(kernel, project):
    (project / "table.csv").write_text("a,b\n1,2\n")
    kernel.execute_ok("%%tools\ntools write-file --path table.csv --content 'x,y'")
    run = Journal(project, environ=_env(project.parent)).last().id
    (project / "table.csv").write_text("the person's edit\n")
    refused = kernel.execute(f"%tools rewind {run}", stop_on_error=False)
    said = refused.stderr + (refused.error or {}).get("evalue", "")  # a UsageError: one line, no traceback
    assert "changed since run" in said and "table.csv" in said and "Traceback" not in said
    assert (project / "table.csv").read_text() == "the person's edit\n"
    forced = kernel.execute_ok(f"%tools rewind {run} --force").stdout
    assert (project / "table.csv").read_text() == "a,b\n1,2\n"
    undo = forced.split("`%tools rewind ")[1].split("`")[0]
    kernel.execute_ok(f"%tools rewind {undo}")
    assert (project / "table.csv").read_text() == "the person's edit\n"


def test_an_interrupted_cell_keeps_what_it_changed(kernel, project):
    (project / "doomed.txt").write_text("still here\n")
    msg_id = kernel.start("%%tools\nrm doomed.txt\necho > interrupt-now.marker\nsleep 60")
    deadline = time.monotonic() + 60
    while not (project / "interrupt-now.marker").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    kernel.manager.interrupt_kernel()
    kernel.finish(msg_id)
    (project / "interrupt-now.marker").unlink()
    last = Journal(project, environ=_env(project.parent)).last()
    assert {e.path: e.kind for e in last.files().values()}["doomed.txt"] == "deleted"
    kernel.execute_ok(f"%tools rewind {last.id} --path doomed.txt")
    assert (project / "doomed.txt").read_text() == "still here\n"


def test_a_killed_kernel_leaves_every_change_its_tools_made_before_the_kill(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    write_config(work, '[policy]\nmode = "accept-edits"\n')
    (work / "one.txt").write_text("one before\n")
    k = Kernel(work, _env(tmp_path))
    try:
        k.execute_ok("%load_ext toolkernel")
        k.start("%%tools\ntools write-file --path one.txt --content 'one after'\n"
                "tools write-file --path two.txt --content two\necho > killed.marker\nsleep 60")
        deadline = time.monotonic() + 60
        while not (work / "killed.marker").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        k.manager.signal_kernel(signal.SIGKILL)
    finally:
        k.shutdown()
    journal = Journal(work, environ=_env(tmp_path))
    [run] = journal.runs()  # read first here: its end is written now, the workspace compared
    assert run.settled is not None and [e.path for e in run.entries] == ["one.txt", "two.txt", "killed.marker"]
    result = subprocess.run([sys.executable, "-m", "toolkernel", "rewind", run.id, "--workdir", str(work)],
                            env={**os.environ, **_env(tmp_path)}, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert (work / "one.txt").read_text() == "one before\n" and not (work / "two.txt").exists()


@pytest.mark.parametrize("cell", ["%%bash", "%%tools"])
def test_a_killed_kernel_leaves_what_a_cells_own_commands_changed_before_the_kill(tmp_path, cell):
    # The shell's own writes are found by comparing the workspace with the one stored as the run
    # started; the kernel never reaches the run's end, so the next reader of the journal compares.
    work = tmp_path / "work"
    work.mkdir()
    write_config(work, '[policy]\nmode = "accept-edits"\n')
    (work / "data.csv").write_text("a,b\n1,2\n")
    (work / "keep.txt").write_text("kept\n")
    os.chmod(work / "keep.txt", 0o640)
    k = Kernel(work, _env(tmp_path))
    try:
        k.execute_ok("%load_ext toolkernel")
        k.start(f"{cell}\necho 'overwritten' > data.csv\nrm keep.txt\necho new > made.txt\n"
                "echo > killed.marker\nsleep 60")
        deadline = time.monotonic() + 60
        while not (work / "killed.marker").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        k.manager.signal_kernel(signal.SIGKILL)
    finally:
        k.shutdown()
    env = {**os.environ, **_env(tmp_path)}
    listed = subprocess.run([sys.executable, "-m", "toolkernel", "changes", "--workdir", str(work)],
                            env=env, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert "its process died before the end" in listed.stdout, listed.stdout
    for line in ("changed   data.csv  (after the fact)", "deleted   keep.txt  (after the fact)",
                 "created   made.txt  (after the fact)"):
        assert line in listed.stdout, listed.stdout
    rewound = subprocess.run([sys.executable, "-m", "toolkernel", "rewind", "--last", "--workdir", str(work)],
                             env=env, capture_output=True, text=True, timeout=120)
    assert rewound.returncode == 0, rewound.stderr
    assert (work / "data.csv").read_text() == "a,b\n1,2\n" and (work / "keep.txt").read_text() == "kept\n"
    assert (work / "keep.txt").stat().st_mode & 0o777 == 0o640 and not (work / "made.txt").exists()


def test_a_killed_kernel_leaves_a_large_file_its_cell_rewrote_in_place_restorable(tmp_path):
    # Its content was copied as the cell started and hashed while it ran; the run never ended, so
    # the next reader of the journal stores that copy, and a rewind puts the file back whole.
    work = tmp_path / "work"
    work.mkdir()
    write_config(work, '[policy]\nmode = "accept-edits"\n')
    original = os.urandom(3 * 1024 * 1024 + 5)
    (work / "big.bin").write_bytes(original)
    k = Kernel(work, _env(tmp_path))
    try:
        k.execute_ok("%load_ext toolkernel")
        k.start("%%bash\ndd if=/dev/urandom of=big.bin bs=1M count=2 conv=notrunc status=none\n"
                "echo > killed.marker\nsleep 60")
        deadline = time.monotonic() + 60
        while not (work / "killed.marker").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        k.manager.signal_kernel(signal.SIGKILL)
    finally:
        k.shutdown()
    assert (work / "big.bin").read_bytes() != original
    rewound = subprocess.run([sys.executable, "-m", "toolkernel", "rewind", "--last", "--workdir", str(work)],
                             env={**os.environ, **_env(tmp_path)}, capture_output=True, text=True, timeout=120)
    assert rewound.returncode == 0, rewound.stderr
    assert "big.bin" in rewound.stdout and (work / "big.bin").read_bytes() == original


def test_a_background_cell_is_recorded_when_it_ends(kernel, project):
    (project / "bg.txt").write_text("before\n")
    kernel.execute_ok("%%bash --bg --proc bg_proc\necho after > bg.txt")
    kernel.execute_ok("bg_proc.wait(timeout=60)")
    journal = Journal(project, environ=_env(project.parent))
    deadline = time.monotonic() + 60  # recorded on the cell's own thread once bash has exited
    while not [r for r in journal.runs() if "bg.txt" in r.files() and r.after is not None]:
        assert time.monotonic() < deadline, [r.files() for r in journal.runs()]
        time.sleep(0.05)
    kernel.execute_ok("%tools rewind --last")
    assert (project / "bg.txt").read_text() == "before\n"


def test_a_run_that_changed_nothing_leaves_no_run_behind(kernel, project):
    before = {run.id for run in Journal(project, environ=_env(project.parent)).runs()}
    kernel.execute_ok("%%bash\ncat toolkernel.toml > /dev/null")
    kernel.execute_ok("%%tools\necho nothing")
    assert {run.id for run in Journal(project, environ=_env(project.parent)).runs()} == before


def test_the_command_line_lists_and_refuses_without_a_traceback(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, **_env(tmp_path)}
    journal = Journal(work, environ=env)
    (work / "f.txt").write_text("before\n")
    run = journal.start_run("direct")
    run.before_change(work / "f.txt")
    (work / "f.txt").write_text("after\n")
    run.finish()

    def toolkernel(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "toolkernel", *args, "--workdir", str(work)], env=env,
                              capture_output=True, text=True, timeout=120)

    listed = toolkernel("changes", "--path", "*.txt")
    assert listed.returncode == 0 and f"run {run.id}" in listed.stdout and "changed   f.txt" in listed.stdout
    unknown = toolkernel("rewind", "20000101-000000-abcdef")
    assert unknown.returncode == 1 and "no run 20000101-000000-abcdef" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    assert toolkernel("rewind").returncode == 2
    assert toolkernel("rewind", "--last").returncode == 0 and (work / "f.txt").read_text() == "before\n"


def test_an_agents_rewind_asks_as_a_write_and_its_listing_does_not(tmp_path, monkeypatch):
    from toolkernel._frontends._serve import DIRECT
    from toolkernel._session import Session

    project = project_with(tmp_path, monkeypatch, "")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    session = Session(project)
    try:
        (project / "f.txt").write_text("before\n")
        run = session.journal.start_run("cell")
        run.before_change(project / "f.txt")
        (project / "f.txt").write_text("after\n")
        run.finish()
        listed = session.run_script("tools changes", RecordingSink(), agent=True)
        assert listed.exit_code == 0
        asked = session.run_script(f"tools rewind --run {run.id}", RecordingSink(), agent=True)
        assert asked.exit_code != 0
        assert asked.report["tools"]["stopped"]["reason"] == "needs_approval"
        assert (project / "f.txt").read_text() == "after\n"
        assert "rewind" not in DIRECT and "changes" not in DIRECT
    finally:
        session.close()


def test_a_serve_agents_rm_is_listed_as_serve_and_its_own_rewind_asks(tmp_path):
    import anyio

    from mcp_client import over_stdio
    from toolkernel._mcp_sdk import StdioServerParameters, types

    work = tmp_path / "work"
    work.mkdir()
    (work / "toolkernel.toml").write_text("")
    _build(work)
    before = _snapshot(work / "build")
    env = {**os.environ, **_env(tmp_path)}
    asked = []

    async def decline(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="decline")

    async def body():
        params = StdioServerParameters(command=sys.executable, args=["-m", "toolkernel", "serve"], env=env,
                                       cwd=str(work))
        async with over_stdio(params, elicit=decline) as client:
            removed = await client.call_tool("bash", {"script": "rm -rf build"})
            listed = await client.call_tool("bash", {"script": "tools changes"})
            refused = await client.call_tool("bash", {"script": "tools rewind --run last"})
            return removed, listed, refused

    async def bounded():
        with anyio.fail_after(180):
            return await body()

    removed, listed, refused = anyio.run(bounded)
    assert removed.structured_content["exit_code"] == 0 and not (work / "build").exists()
    assert " serve " in listed.structured_content["stdout"] and "build/run.sh" in listed.structured_content["stdout"]
    assert refused.structured_content["exit_code"] != 0 and asked and not (work / "build").exists()
    cli = subprocess.run([sys.executable, "-m", "toolkernel", "rewind", "--last", "--workdir", str(work)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert _snapshot(work / "build") == before
