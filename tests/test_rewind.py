"""The journal of changes (`_rewind.py`, issue 38): recording, listing, rewinding, limits, damage."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from toolkernel._config._config import load_config
from toolkernel._config._rewind import RewindLimits
from toolkernel._rewind import Journal, RewindError, iter_changes, journal_root, rewind

from kernel_helpers import project_with


@pytest.fixture
def workspace(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    root = tmp_path / "ws"
    root.mkdir()
    return root


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
    blobs = list((journal_root(workspace) / "blobs").iterdir())
    blobs[0].write_bytes(b"rewritten by someone")
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
    run.finish()
    assert journal.remove_old(now=run.time + 3600) == 0
    assert journal.remove_old(now=run.time + 2 * 86400) == 1
    assert journal.runs() == [] and list((journal_root(workspace) / "blobs").iterdir()) == []


def test_rewind_config_is_read_from_a_trusted_file(tmp_path, monkeypatch):
    project = project_with(tmp_path, monkeypatch, '[rewind]\nmax_file_mb = 8\nignore = ["data/**"]\n')
    config = load_config(project)
    assert config.rewind == RewindLimits(max_file_mb=8, ignore=("data/**",))
    (project / "toolkernel.toml").write_text('[rewind]\nmax_file_mb = 0\n')
    with pytest.raises(Exception, match="rewind.max_file_mb"):
        load_config(project)
