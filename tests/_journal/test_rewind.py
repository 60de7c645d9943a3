"""The journal of changes (`_journal/`, issue 38): recording, listing, rewinding, limits, damage."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from toolkernel._config._config import load_config
from toolkernel._config._rewind import RewindLimits
from toolkernel._journal import Journal, RewindError, diff_of, iter_changes, journal_root, rewind

from kernel_helpers import project_with


def _damage(journal: Journal, digest: str | None = None) -> None:
    """A stored content (every one, without `digest`) rewritten behind the journal's back."""
    import sqlite3
    import zlib

    db = sqlite3.connect(journal.packs.path, isolation_level=None)
    try:
        where = ("WHERE hash = ?", (digest,)) if digest else ("", ())
        db.execute(f"UPDATE contents SET codec = 1, data = ? {where[0]}", (zlib.compress(b"tampered"), *where[1]))
    finally:
        db.close()


def _stored(journal: Journal) -> dict[str, bytes]:
    """Every content the journal holds, by hash (read as the journal reads it, unchecked)."""
    found = {digest: journal.packs.get(digest) for digest in journal.packs.hashes()}
    blobs = journal.root / "blobs"
    if blobs.exists():
        found.update({p.name: p.read_bytes() for p in blobs.iterdir() if not p.name.startswith(".")})
    return found


def _files(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file below `root` (the journal's own places aside): content and mode bits."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            found[str(path.relative_to(root))] = (path.read_bytes(), path.stat().st_mode & 0o7777)
    return found


def _run_that_changes_everything(journal: Journal, root: Path):
    run = journal.start_run("cell")
    run.before_change(root / "a.txt")
    (root / "a.txt").write_bytes(b"new a\n")
    run.before_change(root / "gone.bin")
    (root / "gone.bin").unlink()
    run.before_change(root / "old.txt", "renamed", to=root / "new.txt")
    run.before_change(root / "new.txt")
    os.rename(root / "old.txt", root / "new.txt")
    run.before_change(root / "made.txt")
    (root / "made.txt").write_text("made\n")
    run.before_change(root / "a.txt")  # a second change in the run records nothing more
    (root / "a.txt").write_bytes(b"newer a\n")
    return run


def _seed(root: Path) -> None:
    (root / "a.txt").write_bytes(b"a\x00\xff original\n")
    (root / "gone.bin").write_bytes(bytes(range(256)))
    os.chmod(root / "gone.bin", 0o751)
    (root / "old.txt").write_text("to be renamed\n")


def test_every_kind_is_listed_and_restored_byte_for_byte_with_mode_bits(workspace):
    _seed(workspace)
    before = _files(workspace)
    journal = Journal(workspace)
    run = _run_that_changes_everything(journal, workspace)
    assert run.finish() == 5
    [listed] = list(iter_changes(journal))
    kinds = {e.path: e.kind for e in listed.files().values()}
    assert kinds == {"a.txt": "changed", "gone.bin": "deleted", "old.txt": "renamed", "new.txt": "created",
                     "made.txt": "created"}
    assert listed.route == "cell" and listed.id == run.id
    done = rewind(journal, run.id)
    assert sorted(done.restored) == sorted(kinds)
    assert _files(workspace) == before


def test_a_file_changed_since_is_refused_untouched_then_forced_and_that_rewind_undone(workspace):
    _seed(workspace)
    journal = Journal(workspace)
    run = _run_that_changes_everything(journal, workspace)
    run.finish()
    (workspace / "made.txt").write_text("the person's own later edit\n")
    after_run = _files(workspace)
    with pytest.raises(RewindError, match=r"changed since run .*made\.txt"):
        rewind(journal, run.id)
    assert _files(workspace) == after_run  # nothing touched
    forced = rewind(journal, run.id, force=True)
    assert forced.recorded_as is not None and not (workspace / "made.txt").exists()
    rewind(journal, forced.recorded_as)  # the rewind is a run of its own: undone, the later edit is back
    assert _files(workspace) == after_run


def test_path_globs_restore_only_some_files(workspace):
    _seed(workspace)
    journal = Journal(workspace)
    run = _run_that_changes_everything(journal, workspace)
    run.finish()
    done = rewind(journal, run.id, paths=["*.bin"])
    assert done.restored == ("gone.bin",)
    assert (workspace / "gone.bin").read_bytes() == bytes(range(256))
    assert (workspace / "a.txt").read_bytes() == b"newer a\n"


def test_past_the_file_limit_the_file_is_not_restorable_with_the_reason(workspace):
    (workspace / "big.dat").write_bytes(b"x" * (2 * 1024 * 1024 + 1))
    journal = Journal(workspace, RewindLimits(max_file_mb=2))
    run = journal.start_run("cell")
    run.before_change(workspace / "big.dat")
    (workspace / "big.dat").write_bytes(b"small")
    run.finish()
    [entry] = journal.run(run.id).entries
    assert "larger than the 2 MiB limit" in entry.not_restorable
    done = rewind(journal, run.id)
    assert done.restored == () and "big.dat: larger than the 2 MiB limit" in done.skipped[0]
    assert (workspace / "big.dat").read_bytes() == b"small"


def test_a_diff_sums_up_binary_large_and_unkept_contents_and_names_a_damaged_one(workspace):
    (workspace / "bin.dat").write_bytes(b"\x00\x01")
    (workspace / "big.txt").write_bytes(b"y\n" * (1024 * 1024))
    journal = Journal(workspace, RewindLimits(max_file_mb=1))
    run = journal.start_run("cell")
    for name in ("bin.dat", "big.txt", "text.txt"):
        run.before_change(workspace / name)
    (workspace / "bin.dat").write_bytes(b"\x00\x02")
    (workspace / "big.txt").write_bytes(b"short\n")
    (workspace / "text.txt").write_bytes(b"no end")
    run.finish()
    assert "-(binary, 2 bytes, sha256" in diff_of(journal, run.id, "bin.dat")
    big = diff_of(journal, run.id, "big.txt")
    assert "-(its content before the run was not kept: larger than the 1 MiB limit" in big and "+short" in big
    assert "+no end\n\\ No newline at end of file" in diff_of(journal, run.id, "text.txt")
    import hashlib

    _damage(journal, hashlib.sha256(b"\x00\x01").hexdigest())
    with pytest.raises(RewindError, match="damaged"):
        diff_of(journal, run.id, "bin.dat")


def test_past_the_days_limit_the_oldest_runs_go_first_then_not_restorable(workspace):
    journal = Journal(workspace, RewindLimits(max_day_mb=1))
    chunk = 600 * 1024
    runs = []
    for name in ("one", "two"):
        (workspace / name).write_bytes(name.encode() * (chunk // len(name)))
        run = journal.start_run("cell")
        run.before_change(workspace / name)
        (workspace / name).unlink()
        run.finish()
        runs.append(run.id)
    kept = [r.id for r in journal.runs()]
    assert kept == [runs[1]]  # the first run was dropped to make room for the second
    (workspace / "huge").write_bytes(b"h" * (1024 * 1024 + 1))
    run = journal.start_run("cell")
    run.before_change(workspace / "huge")
    (workspace / "huge").unlink()
    run.finish()
    assert "past the day's limit of 1 MiB" in journal.run(run.id).entries[0].not_restorable


def test_the_journals_own_places_and_ignored_globs_are_not_recorded(workspace):
    journal = Journal(workspace, RewindLimits(ignore=("data/*",)))
    run = journal.start_run("cell")
    for name in (".toolkernel/outputs/x.txt", "tool-images/a.png", "data/raw.csv", "../outside.txt"):
        run.before_change(workspace / name)
    assert run.finish() == 0 and journal.runs() == []


def test_a_damaged_entry_fails_that_restore_cleanly_and_touches_nothing(workspace):
    _seed(workspace)
    journal = Journal(workspace)
    run = _run_that_changes_everything(journal, workspace)
    run.finish()
    after_run = _files(workspace)
    _damage(journal)
    with pytest.raises(RewindError, match="damaged"):
        rewind(journal, run.id)
    assert _files(workspace) == after_run
    (journal_root(workspace) / "runs" / f"{run.id}.jsonl").write_bytes(b"{not json\n")
    with pytest.raises(RewindError, match=f"record of run {run.id} is damaged"):
        rewind(journal, run.id)
    assert _files(workspace) == after_run


def test_a_run_killed_midway_keeps_what_it_recorded_and_needs_force(workspace):
    _seed(workspace)
    journal = Journal(workspace)
    run = journal.start_run("cell")
    run.before_change(workspace / "a.txt")
    (workspace / "a.txt").write_text("half done")  # then the process dies: no finish()
    [record] = journal.runs()
    assert record.after is None and [e.path for e in record.entries] == ["a.txt"]
    with pytest.raises(RewindError, match="did not end"):
        rewind(journal, run.id)
    rewind(journal, run.id, force=True)
    assert (workspace / "a.txt").read_bytes() == b"a\x00\xff original\n"


def test_the_journal_is_in_the_state_folder_not_the_workspace(workspace, tmp_path):
    assert journal_root(workspace).is_relative_to(tmp_path / "state" / "toolkernel" / "journal")


def test_old_runs_are_dropped_after_keep_days(workspace):
    _seed(workspace)
    journal = Journal(workspace, RewindLimits(keep_days=1))
    run = journal.start_run("cell")
    run.before_change(workspace / "a.txt")
    (workspace / "a.txt").write_text("changed")
    run.finish()
    assert journal.remove_old(now=run.time + 3600) == 0
    assert journal.remove_old(now=run.time + 2 * 86400) == 1
    assert journal.runs() == [] and _stored(journal) == {}


def test_rewind_config_is_read_from_a_trusted_file(tmp_path, monkeypatch):
    project = project_with(tmp_path, monkeypatch, '[rewind]\nmax_file_mb = 8\nignore = ["data/**"]\n')
    config = load_config(project)
    assert config.rewind == RewindLimits(max_file_mb=8, ignore=("data/**",))
    (project / "toolkernel.toml").write_text('[rewind]\nmax_file_mb = 0\n')
    with pytest.raises(Exception, match="rewind.max_file_mb"):
        load_config(project)


# -- recording from the own tools (a script's calls, a direct call) --------------------------------

@pytest.fixture
def session(session_with):
    return session_with()


def _notebook(path: Path) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1", id="first")]
    path.write_text(nbformat.writes(nb))


def test_own_tools_record_a_cells_run_and_its_rewind_restores_it(session):
    from kernel_helpers import RecordingSink

    root = session.workdir
    (root / "a.txt").write_bytes(b"alpha\r\nbeta\n")
    os.chmod(root / "a.txt", 0o640)
    _notebook(root / "n.ipynb")
    before = _files(root)
    script = ("tools write-file --path a.txt --content 'replaced'\n"
              "tools edit-file --path a.txt --old_string replaced --new_string edited\n"
              "tools write-file --path sub/new.txt --content new\n"
              "tools notebook-read --notebook_path n.ipynb > /dev/null\n"
              "tools notebook-edit --notebook_path n.ipynb --cell_id first --new_source 'x = 2'\n")
    sink = RecordingSink()
    result = session.run_script(script, sink)
    assert result.exit_code == 0, sink.stderr_text
    assert result.changes == {"run": result.changes["run"], "files": 4}
    run = session.journal.run(result.changes["run"])
    assert run.route == "cell"
    assert {e.path: e.kind for e in run.files().values()} == {
        "a.txt": "changed", "sub/new.txt": "created", "n.ipynb": "changed", "sub": "created"}  # the folder it made
    rewind(session.journal, run.id)
    assert _files(root) == before


def test_a_direct_call_is_a_run_of_its_own(session):
    from toolkernel._frontends._direct import call_argv

    call_argv(session, ["write-file", "--path", "d.txt", "--content", "direct"])
    [run] = session.journal.runs()
    assert run.route == "direct" and run.after is not None and [e.path for e in run.entries] == ["d.txt"]
    rewind(session.journal, None)
    assert not (session.workdir / "d.txt").exists()


def test_a_run_that_changes_nothing_leaves_no_trace(session):
    from kernel_helpers import RecordingSink

    (session.workdir / "r.txt").write_text("read me")
    result = session.run_script("tools read-file --path r.txt", RecordingSink())
    assert result.exit_code == 0 and result.changes is None and session.journal.runs() == []
    # an edit the tool refuses was recorded before it, and is no change: not listed
    refused = session.run_script("tools edit-file --path r.txt --old_string absent --new_string x", RecordingSink())
    assert refused.exit_code == 1 and refused.changes is None and session.journal.runs() == []


# -- a script's own commands: the workspace compared before and after the run -------------------

def _tree(root: Path) -> None:
    (root / "build" / "sub").mkdir(parents=True)
    (root / "build" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "build" / "run.sh", 0o755)
    (root / "build" / "sub" / "data.bin").write_bytes(bytes(range(256)) * 40)
    (root / "notes.txt").write_text("keep me\n")
    (root / "old.csv").write_text("a,b\n1,2\n")


def test_a_folder_removed_by_a_bashkit_script_is_listed_after_the_fact_and_restored(session):
    from kernel_helpers import RecordingSink

    root = session.workdir
    _tree(root)
    before = _files(root)
    sink = RecordingSink()
    result = session.run_script("rm -rf build\necho more >> notes.txt\nmv old.csv new.csv\necho x > made.txt",
                                sink)
    assert result.exit_code == 0, sink.stderr_text
    run = session.journal.run(result.changes["run"])
    kinds = {e.path: e.kind for e in run.files().values()}
    assert kinds["build/run.sh"] == kinds["build/sub/data.bin"] == "deleted"
    assert kinds["notes.txt"] == "changed" and kinds["made.txt"] == kinds["new.csv"] == "created"
    assert kinds["old.csv"] in ("renamed", "deleted")  # Bashkit's mv may copy (a new inode)
    assert all(e.after_the_fact for e in run.entries)
    rewind(session.journal, run.id)
    assert _files(root) == before


def test_a_file_changed_by_a_host_bash_cell_is_restored_with_its_mode(session):
    from kernel_helpers import RecordingSink
    from toolkernel._runners._hostbash._channel import Channel
    from toolkernel._runners._hostbash._runner import HostBashRunner

    root = session.workdir
    _tree(root)
    before = _files(root)
    channel = Channel()
    try:
        script = "rm -r build && chmod 600 notes.txt && printf 'x' > notes.txt && mv old.csv moved.csv"
        sink = RecordingSink()
        result = session.run_script(script, sink, runner=HostBashRunner(channel))
    finally:
        channel.close()
    assert result.exit_code == 0, sink.stderr_text
    run = session.journal.run(result.changes["run"])
    kinds = {e.path: (e.kind, e.to) for e in run.files().values()}
    assert kinds["old.csv"] == ("renamed", "moved.csv") and kinds["notes.txt"] == ("changed", None)
    rewind(session.journal, run.id)
    assert _files(root) == before


def test_a_hostile_agent_cell_cannot_see_or_corrupt_the_journal(session, tmp_path):
    """An agent's host cell runs in the OS sandbox, which hides the state folder the journal is in."""
    from kernel_helpers import RecordingSink
    from toolkernel._runners._hostbash._channel import Channel
    from toolkernel._runners._hostbash._runner import HostBashRunner
    from toolkernel._sandbox import mechanism

    if mechanism() is None:
        pytest.skip("no OS sandbox on this machine")
    root = session.workdir
    (root / "precious.txt").write_text("v1\n")
    deleted = session.run_script("rm precious.txt", RecordingSink()).changes["run"]
    journal = journal_root(root)
    stored = _stored(session.journal)
    channel = Channel()
    try:
        script = (f"ls -R {tmp_path / 'state'} > seen.txt 2>&1; "
                  f"find {journal} -type f -exec sh -c 'echo evil > \"$1\"' _ {{}} \\; 2>> seen.txt; "
                  f"rm -rf {tmp_path / 'state'} 2>> seen.txt; true")
        session.run_script(script, RecordingSink(), runner=HostBashRunner(channel, agent=True),
                           approver=_allow_all)
    finally:
        channel.close()
    assert "contents.sqlite" not in (root / "seen.txt").read_text() and "runs" not in (root / "seen.txt").read_text()
    now = _stored(session.journal)
    assert all(now.get(digest) == data for digest, data in stored.items())  # (the cell's own start is stored too)
    assert b"evil\n" not in now.values()
    rewind(session.journal, deleted)
    assert (root / "precious.txt").read_text() == "v1\n"


async def _allow_all(request):
    from toolkernel._approval._approver import Answer

    return Answer.ONCE


def test_the_run_report_names_the_runs_changes(session):
    from kernel_helpers import RecordingSink

    (session.workdir / "gone.txt").write_text("x")
    script = "rm gone.txt\nf=../outside.txt\ntools write-file --path \"$f\" --content x"  # asks mid-run
    result = session.run_script(script, RecordingSink())
    assert result.exit_code != 0
    assert result.report["changes"] == {"run": result.changes["run"], "files": 1}
    import json

    import jsonschema

    schema = json.loads((Path(__file__).parent.parent.parent / "docs" / "report.schema.json").read_text())
    jsonschema.validate(result.report, schema)


def test_rewinding_a_later_run_then_an_earlier_one_needs_no_force(workspace):
    (workspace / "f.txt").write_text("v1\n")
    journal = Journal(workspace)
    ids = []
    for text in ("v2\n", "v3\n"):
        run = journal.start_run("cell")
        run.before_change(workspace / "f.txt")
        (workspace / "f.txt").write_text(text)
        run.finish()
        ids.append(run.id)
    rewind(journal, ids[1])
    assert (workspace / "f.txt").read_text() == "v2\n"
    rewind(journal, ids[0])  # the file is as run 1 left it, time included
    assert (workspace / "f.txt").read_text() == "v1\n"


def test_a_forged_entry_or_a_link_put_on_the_way_cannot_lead_a_rewind_outside(workspace, tmp_path):
    import json

    journal = Journal(workspace)
    (workspace / "sub").mkdir()
    (workspace / "sub" / "f.txt").write_text("before\n")
    run = journal.start_run("cell")
    run.before_change(workspace / "sub" / "f.txt")
    (workspace / "sub" / "f.txt").unlink()
    run.finish()
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "sub").rmdir()
    (workspace / "sub").symlink_to(outside)  # a script's link where the folder was
    with pytest.raises(RewindError, match="leads outside the workspace"):
        rewind(journal, run.id, force=True)
    assert list(outside.iterdir()) == []
    runs = journal_root(workspace) / "runs"
    forged = "20991231-235959-abcdef"
    head = {"version": 1, "run": forged, "time": 0, "route": "cell"}
    entry = {"path": "../outside/evil.txt", "kind": "created", "before": None}
    (runs / f"{forged}.jsonl").write_text(json.dumps(head) + "\n" + json.dumps(entry) + "\n")
    with pytest.raises(RewindError, match="damaged"):
        rewind(journal, forged, force=True)


def test_dropping_old_runs_keeps_the_contents_the_workspace_index_holds(session):
    from kernel_helpers import RecordingSink

    root = session.workdir
    (root / "kept.txt").write_text("unchanged for weeks\n")
    (root / "gone.txt").write_text("deleted\n")
    session.run_script("rm gone.txt", RecordingSink())  # the comparison stores kept.txt in the index
    assert session.journal.remove_old(now=time.time() + 30 * 86400) == 1
    result = session.run_script("rm kept.txt", RecordingSink())
    rewind(session.journal, result.changes["run"])
    assert (root / "kept.txt").read_text() == "unchanged for weeks\n"


def test_tools_rewind_in_a_script_restores_and_records_into_that_run(session):
    from kernel_helpers import RecordingSink

    root = session.workdir
    (root / "toolkernel.toml").write_text('[policy]\nmode = "accept-edits"\n')  # unchanged, rewritten
    (root / "f.txt").write_text("before\n")
    first = session.run_script("echo after > f.txt", RecordingSink()).changes["run"]
    sink = RecordingSink()
    undo = session.run_script("tools rewind --run last", sink)
    assert undo.exit_code == 0, sink.stderr_text
    assert f"rewound run {first}" in sink.stdout_text and (root / "f.txt").read_text() == "before\n"
    assert undo.changes["files"] == 1  # the rewind's change, once: recorded by the tool, not again after the fact
    entry = session.journal.run(undo.changes["run"]).entries[0]
    assert entry.path == "f.txt" and not entry.after_the_fact
    person = session.journal.start_run("cell")  # a person's edit of the config (scripts cannot write it)
    person.before_change(root / "toolkernel.toml")
    with open(root / "toolkernel.toml", "a") as config:
        config.write("# a comment\n")
    person.finish()
    refused = RecordingSink()
    assert session.run_script(f"tools rewind --run {person.id}", refused).exit_code != 0
    assert "rewound by a person" in refused.stderr_text


def test_a_served_cell_is_recorded_kept_and_a_damaged_cell_entry_is_refused(workspace):
    """A cell changed through a Jupyter Server: its source kept by hash (as file contents are, and
    not dropped while its run is kept); a forged or damaged cell line makes the whole run unreadable."""
    journal = Journal(workspace)
    run = journal.start_run("direct")
    run.before_cell("http://127.0.0.1:1/", "a.ipynb", "c1", "x = 20")
    run.before_cell("http://127.0.0.1:1/", "a.ipynb", "c1", "x = 30")  # a second edit in the run: nothing more
    run.after_cell("http://127.0.0.1:1/", "a.ipynb", "c1", "x = 50")
    assert run.finish() == 1
    (cell,) = journal.run(run.id).cells
    assert journal.blob(cell.before) == b"x = 20" and cell.name == "a.ipynb#c1"
    journal.drop(journal.start_run("x").id)  # collecting unheld contents keeps the cell's
    assert journal.blob(cell.before) == b"x = 20"
    with pytest.raises(RewindError, match="a session paired with that server"):
        rewind(journal, run.id)
    path = journal_root(workspace) / "runs" / f"{run.id}.jsonl"
    path.write_text(path.read_text().replace(cell.before, "../../etc/passwd"))
    with pytest.raises(RewindError, match="damaged"):
        rewind(journal, run.id, force=True)


def test_an_edit_that_never_completed_changed_no_cell(workspace):
    journal = Journal(workspace)
    run = journal.start_run("direct")
    run.before_cell("http://127.0.0.1:1/", "a.ipynb", "c1", "x = 20")  # the edit was refused after this
    assert run.finish() == 0
    assert list(iter_changes(journal)) == []


def test_a_listing_counts_files_and_cells_apart():
    from toolkernel._journal import CellEntry, Entry, RunRecord, describe_runs

    run = RunRecord("20261206-120000-abcdef", time.time(), "serve",
                    entries=[Entry("a.txt", "created"), Entry("b.txt", "created")], after={},
                    cells=[CellEntry("http://127.0.0.1:8888/", "n.ipynb", "c1", "0" * 64, "1" * 64)])
    assert describe_runs([run]).splitlines()[0].endswith("serve  2 files, 1 cell")
    run.entries = []
    assert describe_runs([run]).splitlines()[0].endswith("serve  1 cell")


def test_what_a_jupyter_server_writes_while_a_cell_runs_is_not_the_runs(session, monkeypatch):
    # Its collaboration store, its checkpoints, and the notebook the cell runs in (which it saves
    # with the cell's outputs, through a `.~` file renamed over it: one mid-save as the run ends): a rewind would write them behind its back, and refuse as "changed since".
    from kernel_helpers import RecordingSink

    root = session.workdir
    (root / "nb.ipynb").write_text("{}")
    monkeypatch.setenv("JPY_SESSION_NAME", str(root / "nb.ipynb"))
    script = ("echo saved > nb.ipynb; echo saving > .~nb.ipynb; echo db > .jupyter_ystore.db; "
              "mkdir -p sub/.ipynb_checkpoints; "
              "echo c > sub/.ipynb_checkpoints/a-checkpoint.ipynb; echo mine > data.txt")
    changes = session.run_script(script, RecordingSink()).changes
    assert [e.path for e in session.journal.run(changes["run"]).entries] == ["data.txt"]
    monkeypatch.delenv("JPY_SESSION_NAME")
    changes = session.run_script("echo again > nb.ipynb", RecordingSink()).changes
    assert [e.path for e in session.journal.run(changes["run"]).entries] == ["nb.ipynb"]  # another notebook's cell


# -- a large file's prior content: copied by the kernel before the run, hashed while it works -----

_LARGE = 3 * 1024 * 1024 + 123  # past `_COPIED_SOON` (1 MiB), and not a whole number of pieces


def _host_cell(session, script: str):
    from journal_helpers import host_cell

    return host_cell(session, script)[0]


def _parts(journal: Journal) -> list[str]:
    return [p.name for p in (journal.root / "blobs").iterdir() if p.name.startswith(".part-")]


def test_a_large_file_rewritten_in_place_by_a_host_cell_is_restored_byte_for_byte(session):
    # `dd conv=notrunc` writes into the same inode: a hard link kept instead of a copy would hold
    # the new bytes too. Two runs: the second copies what the first left (the index moved on).
    import hashlib

    big = session.workdir / "big.bin"
    original = os.urandom(_LARGE)
    big.write_bytes(original)
    inode = big.stat().st_ino
    first = _host_cell(session, "dd if=/dev/urandom of=big.bin bs=1M count=2 conv=notrunc status=none")
    assert big.stat().st_ino == inode and big.read_bytes() != original and big.stat().st_size == _LARGE
    after_first = big.read_bytes()
    second = _host_cell(session, "dd if=/dev/urandom of=big.bin bs=1M count=1 seek=1 conv=notrunc status=none")
    [entry] = session.journal.run(first.changes["run"]).entries
    assert entry.after_the_fact and entry.before["hash"] == hashlib.sha256(original).hexdigest()
    # Each run's part went once its end was written; the second run's output is copied for the next.
    session.journal.wait_for_copies()
    assert len(_parts(session.journal)) == 1
    rewind(session.journal, second.changes["run"])
    assert big.read_bytes() == after_first
    rewind(session.journal, first.changes["run"])
    assert big.read_bytes() == original


def test_a_large_files_damaged_content_fails_its_restore_and_touches_nothing(session):
    big = session.workdir / "big.bin"
    big.write_bytes(os.urandom(_LARGE))
    run = _host_cell(session, "printf 'in place' | dd of=big.bin conv=notrunc status=none").changes["run"]
    [entry] = session.journal.run(run).entries
    blob = session.journal.root / "blobs" / entry.before["hash"]
    damaged = bytearray(blob.read_bytes())
    damaged[-1] ^= 0xFF
    os.chmod(blob, 0o600)
    blob.write_bytes(bytes(damaged))
    now = big.read_bytes()
    with pytest.raises(RewindError, match="damaged"):
        rewind(session.journal, run)
    assert big.read_bytes() == now


def test_a_large_file_past_the_days_limit_is_not_restorable_and_leaves_no_copy(workspace):
    from toolkernel._journal._scan import Comparison

    (workspace / "big.bin").write_bytes(os.urandom(_LARGE))
    journal = Journal(workspace, RewindLimits(max_day_mb=2))
    run = journal.start_run("cell")
    compared = Comparison(journal, run)
    (workspace / "big.bin").write_bytes(b"after")
    compared.record(run)
    run.finish()
    [entry] = journal.run(run.id).entries
    assert "past the day's limit of 2 MiB" in entry.not_restorable
    assert _parts(journal) == [] and not [p for p in (journal.root / "blobs").iterdir() if p.stat().st_size > 1024]


def test_two_large_contents_stored_as_the_days_limit_drops_an_older_run_are_both_kept(workspace):
    # Making room for the second drops the older run and collects what nothing holds; the first,
    # stored a moment before, is not yet named by any line: its part (a second name) holds it.
    from toolkernel._journal._scan import Comparison

    journal = Journal(workspace, RewindLimits(max_day_mb=8))
    (workspace / "old.bin").write_bytes(os.urandom(2 * 1024 * 1024))  # the first fits beside it, not the second
    older = journal.start_run("cell")
    older.before_change(workspace / "old.bin")
    (workspace / "old.bin").unlink()
    older.finish()
    before = {name: os.urandom(_LARGE) for name in ("a.bin", "b.bin")}
    for name, data in before.items():
        (workspace / name).write_bytes(data)
    run = journal.start_run("cell")
    compared = Comparison(journal, run)
    for name in before:
        with open(workspace / name, "r+b") as f:
            f.write(b"rewritten in place")
    compared.record(run)
    run.finish()
    journal.wait_for_copies()  # the files the run left are copied after it: that drops no later run
    assert [r.id for r in journal.runs()] == [run.id]  # the older run went to make room
    rewind(journal, run.id)
    assert {name: (workspace / name).read_bytes() for name in before} == before


def _copies_before_runs(monkeypatch) -> list[str]:
    """The large files copied as a shell run starts (not those copied after the run before)."""
    import toolkernel._journal._store as journal_module

    copied, real = [], journal_module.copy_part

    def counted(blobs, fd):
        copied.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(blobs, fd)

    monkeypatch.setattr(journal_module, "copy_part", counted)
    return copied


def test_a_large_file_a_run_wrote_is_copied_after_it_and_the_next_run_starts_without_a_copy(session, monkeypatch):
    copied = _copies_before_runs(monkeypatch)
    big = session.workdir / "big.bin"
    first = _host_cell(session, "head -c 3000000 /dev/urandom > big.bin")
    assert session.journal.run(first.changes["run"]).files()["big.bin"].kind == "created"
    session.journal.wait_for_copies()
    written = big.read_bytes()
    second = _host_cell(session, "dd if=/dev/urandom of=big.bin bs=1M count=1 conv=notrunc status=none")
    assert copied == []  # the first run's output was copied after it, not as the second started
    rewind(session.journal, second.changes["run"])
    assert big.read_bytes() == written
    session.journal.wait_for_copies()
    assert len(_parts(session.journal)) == 1  # the rewind's own output, kept for a next run
    session.close()
    assert _parts(session.journal) == []  # no run comes now: the copy went


def test_a_copy_made_after_a_run_is_not_taken_once_the_file_changed_again(session, monkeypatch):
    # Rewritten in place with the same size, its mtime put back: only its ctime says it moved.
    copied = _copies_before_runs(monkeypatch)
    big = session.workdir / "big.bin"
    _host_cell(session, "head -c 3000000 /dev/urandom > big.bin")
    session.journal.wait_for_copies()
    stamp = big.stat()
    changed = os.urandom(3_000_000)
    with open(big, "r+b") as f:
        f.write(changed)
    os.utime(big, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    second = _host_cell(session, "printf 'in place' | dd of=big.bin conv=notrunc status=none")
    assert copied == [str(big)]  # not the copy made after the first run: copied again
    rewind(session.journal, second.changes["run"])
    assert big.read_bytes() == changed


def test_a_file_written_while_it_is_copied_after_a_run_is_copied_again_by_the_next(workspace, monkeypatch):
    import toolkernel._journal._parts as parts
    from toolkernel._journal._scan import walk
    from toolkernel._journal._scan import Comparison

    big = workspace / "big.bin"
    big.write_bytes(os.urandom(_LARGE))
    journal = Journal(workspace)
    real = parts.copy_into

    def written_meanwhile(src, dst):
        real(src, dst)
        with open(big, "ab") as f:
            f.write(b"more")

    monkeypatch.setattr(parts, "copy_into", written_meanwhile)
    journal.copy_after(walk(journal.workdir, journal.ignores), time.time())
    journal.wait_for_copies()
    monkeypatch.setattr(parts, "copy_into", real)
    assert _parts(journal) == []  # the copy did not match the file: gone
    now = big.read_bytes()
    run = journal.start_run("cell")
    compared = Comparison(journal, run)
    big.write_bytes(b"the run's")
    compared.record(run)
    run.finish()
    rewind(journal, run.id)
    assert big.read_bytes() == now


_KILLED_AFTER_TAKING_A_COPY = """
import os, signal, sys, threading
import toolkernel._journal._parts as parts
from toolkernel._journal import Journal
from toolkernel._journal._scan import Comparison

workdir = sys.argv[1]
big = os.path.join(workdir, "big.bin")
journal = Journal(workdir)
run = journal.start_run("cell")
compared = Comparison(journal, run)
with open(big, "r+b") as f:
    f.write(b"the first run")
compared.record(run)
run.finish()
journal.wait_for_copies()
with open(sys.argv[2], "wb") as f:
    f.write(open(big, "rb").read())
run = journal.start_run("cell")
compared = Comparison(journal, run)
assert compared.taken == {"big.bin"}, compared.taken
with open(big, "r+b") as f:
    f.write(b"the second run")
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_run_killed_after_taking_a_copy_made_after_the_run_before_is_settled(workspace):
    import signal
    import subprocess
    import sys

    (workspace / "big.bin").write_bytes(os.urandom(_LARGE))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    kept = workspace.parent / "after-first"
    died = subprocess.run([sys.executable, "-c", _KILLED_AFTER_TAKING_A_COPY, str(workspace), str(kept)],
                          env=env, timeout=120)
    assert died.returncode == -signal.SIGKILL
    after_first = kept.read_bytes()
    journal = Journal(workspace)
    second, first = journal.runs()
    assert second.settled is not None and _parts(journal) == []
    rewind(journal, second.id)
    assert (workspace / "big.bin").read_bytes() == after_first


@pytest.mark.parametrize("kernel_copy", ["refused", "stops short"])
def test_a_copy_the_kernel_cannot_finish_is_finished_by_reading(tmp_path, monkeypatch, kernel_copy):
    import errno

    from toolkernel._journal._parts import copy_part

    data = os.urandom(_LARGE)
    (tmp_path / "src").write_bytes(data)
    real = os.copy_file_range

    def refused(*args):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    def stops_short(src, dst, count, *rest):  # one piece, then "done" (as some filesystems answer)
        return real(src, dst, min(count, 4096), *rest) if os.lseek(src, 0, os.SEEK_CUR) == 0 else 0

    monkeypatch.setattr(os, "copy_file_range", refused if kernel_copy == "refused" else stops_short)
    fd = os.open(tmp_path / "src", os.O_RDONLY)
    try:
        part = copy_part(tmp_path, fd)
    finally:
        os.close(fd)
    assert part.read_bytes() == data


_KILLED_AFTER_THE_COPY = """
import os, signal, sys, threading
import toolkernel._journal._parts as parts
from toolkernel._journal import Journal
from toolkernel._journal._scan import Comparison

workdir, stage = sys.argv[1], sys.argv[2]
if stage == "copied":  # killed before the thread hashed the part
    parts.Hashing._run = lambda self: threading.Event().wait()
journal = Journal(workdir)
run = journal.start_run("cell")
compared = Comparison(journal, run)
if stage != "copied":
    compared.hashing.hashes()  # hashed (and renamed), never made a stored content
with open(os.path.join(workdir, "big.bin"), "r+b") as big:
    big.write(b"rewritten in place by the run")
with open(os.path.join(workdir, "small.txt"), "w") as small:
    small.write("changed too")
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("stage", ["copied", "hashed", "damaged", "missing"])
def test_a_run_killed_after_its_large_copy_is_settled_by_the_next_reader(workspace, stage):
    """The process dies before the run's end: the next reader stores its part (hashing it if the
    thread had not, checking it against the hash its name took if it had), or says why not."""
    import signal
    import subprocess
    import sys

    original = os.urandom(_LARGE)
    (workspace / "big.bin").write_bytes(original)
    (workspace / "small.txt").write_text("small before\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    died = subprocess.run([sys.executable, "-c", _KILLED_AFTER_THE_COPY, str(workspace),
                           "copied" if stage == "copied" else "hashed"], env=env, timeout=120)
    assert died.returncode == -signal.SIGKILL
    journal = Journal(workspace)
    [part] = _parts(journal)
    assert (part.count(".") == 1) == (stage == "copied")  # `.part-<id>`, or `.part-<id>.<hash>` once hashed
    if stage == "damaged":
        (journal.root / "blobs" / part).write_bytes(os.urandom(_LARGE))
    elif stage == "missing":
        (journal.root / "blobs" / part).unlink()
    [run] = journal.runs()  # read first here: settled
    assert run.settled is not None and _parts(journal) == []
    files = run.files()
    assert files["big.bin"].kind == files["small.txt"].kind == "changed"
    done = rewind(journal, run.id)
    assert (workspace / "small.txt").read_text() == "small before\n"
    if stage in ("copied", "hashed"):
        assert sorted(done.restored) == ["big.bin", "small.txt"]
        assert (workspace / "big.bin").read_bytes() == original
    else:
        why = "damaged in the journal" if stage == "damaged" else "missing from the journal"
        assert why in files["big.bin"].not_restorable and why in done.skipped[0]
        assert (workspace / "big.bin").read_bytes().startswith(b"rewritten in place by the run")


def test_contents_stored_before_a_run_are_kept_when_the_days_limit_drops_an_older_run(workspace):
    # Small files that moved are stored one by one before a shell run, and the workspace's index
    # that names them is written after the last: making room for a later one drops an older run
    # and collects what nothing holds, which must not be the contents stored a moment before.
    from toolkernel._journal._scan import Comparison

    from toolkernel._journal._named import Named

    journal = Journal(workspace, RewindLimits(max_day_mb=1))
    (workspace / "old").write_bytes(b"o" * 600 * 1024)
    older = journal.start_run("cell")
    older.before_change(workspace / "old")
    (workspace / "old").unlink()
    older.finish()
    before = {"a.bin": b"a" * 300 * 1024, "b.bin": b"b" * 300 * 1024}
    for name, data in before.items():
        (workspace / name).write_bytes(data)
    run = journal.start_run("cell")
    compared = Comparison(journal, run, named=Named(frozenset(before), True))  # the run names them
    for name in before:
        (workspace / name).write_bytes(b"changed")
    compared.record(run)
    run.finish()
    assert [r.id for r in journal.runs()] == [run.id]  # the older run went to make room
    rewind(journal, run.id)
    assert {name: (workspace / name).read_bytes() for name in before} == before


def test_a_long_lived_journal_counts_out_of_the_days_limit_what_is_a_day_old(workspace, monkeypatch):
    # One kernel across two days: what it stored yesterday no longer counts against today's limit,
    # so today's content does not push yesterday's run out.
    import toolkernel._journal._store as journal_module

    journal = Journal(workspace, RewindLimits(max_day_mb=1))
    (workspace / "a.bin").write_bytes(b"a" * 600 * 1024)
    yesterday = journal.start_run("cell")
    yesterday.before_change(workspace / "a.bin")
    (workspace / "a.bin").unlink()
    yesterday.finish()
    later = time.time() + 25 * 3600
    monkeypatch.setattr(journal_module.time, "time", lambda: later)
    (workspace / "b.bin").write_bytes(b"b" * 600 * 1024)
    today = journal.start_run("cell")
    today.before_change(workspace / "b.bin")
    (workspace / "b.bin").unlink()
    today.finish()
    assert {run.id for run in journal.runs()} == {yesterday.id, today.id}
    [entry] = journal.run(today.id).entries
    assert entry.not_restorable is None


def test_a_run_file_made_a_moment_ago_and_still_empty_is_no_run_yet(workspace):
    # A run's file is made, then its head line written: a reader between the two (another
    # thread's listing, the day's limit counted after a run) skips it instead of failing.
    journal = Journal(workspace)
    done = journal.start_run("cell")
    done.before_change(workspace / "made.txt")
    (workspace / "made.txt").write_text("made\n")
    done.finish()
    (journal.root / "runs" / "20261206-120000-abcdef.jsonl").write_bytes(b"")
    assert [run.id for run in journal.runs()] == [done.id]
    with pytest.raises(RewindError, match="damaged"):
        journal.run("20261206-120000-abcdef")


def test_back_to_back_runs_at_the_days_limit_each_end_and_rewind_with_copies_made_after_them(workspace):
    # Each run takes the copy made after the one before, while that copy's thread drops old runs
    # for it; the runs begin and end as it does (a reader once met a run file still empty there).
    from toolkernel._journal._scan import Comparison

    big = workspace / "big.bin"
    big.write_bytes(os.urandom(_LARGE))
    journal = Journal(workspace, RewindLimits(max_day_mb=10))
    contents = []
    for _ in range(40):
        contents.append(big.read_bytes())
        run = journal.start_run("cell")
        compared = Comparison(journal, run)
        with open(big, "r+b") as f:
            f.write(os.urandom(4096))
        compared.record(run)
        run.finish()
    journal.wait_for_copies()
    kept = journal.runs()
    assert 1 < len(kept) < 40  # the day's limit dropped the oldest
    for run, before in zip(kept, reversed(contents)):
        rewind(journal, run.id)
        assert big.read_bytes() == before


def test_a_rewind_sweeps_each_folder_it_writes_of_killed_writers_leftovers_once(workspace, monkeypatch):
    import toolkernel._atomic as atomic

    (workspace / "out").mkdir()
    for i in range(3):
        (workspace / "out" / f"f{i}.txt").write_text(f"before {i}\n")
    journal = Journal(workspace)
    run = journal.start_run("cell")
    for i in range(3):
        run.before_change(workspace / "out" / f"f{i}.txt")
        (workspace / "out" / f"f{i}.txt").write_text(f"after {i}\n")
    run.finish()
    leftover = workspace / "out" / ".f0.txt.abcd1234.toolkernel.tmp"  # a writer killed mid-write
    leftover.write_text("half")
    long_ago = time.time() - atomic.STALE_TEMP_SECONDS - 60
    os.utime(leftover, (long_ago, long_ago))
    swept = []
    real = atomic._remove_stale_temps
    monkeypatch.setattr(atomic, "_remove_stale_temps", lambda folder: (swept.append(folder), real(folder)))
    rewind(journal, run.id)
    assert not leftover.exists() and len(swept) == 1
    assert [(workspace / "out" / f"f{i}.txt").read_text() for i in range(3)] == [f"before {i}\n" for i in range(3)]
