"""A rewind writes only inside the workspace, race-free (`_journal/_restore.py`, issue 44 item 4)."""

from __future__ import annotations

import os

import pytest

import toolkernel._checked_open as checked
import toolkernel._journal._restore as restore
from toolkernel._checked_open import LinkOnTheWay, folder_beneath
from toolkernel._journal import Journal, describe_rewind, rewind


@pytest.fixture(params=["openat2", "walk"])
def way(request, monkeypatch) -> str:
    """Both ways of reaching a folder below the workspace: openat2, and the walk name by name."""
    if request.param == "walk":
        monkeypatch.setattr(checked, "_openat2_missing", True)
    elif checked._openat2_missing:
        pytest.skip("no openat2 on this machine")
    return request.param


def test_a_folder_swapped_for_a_link_to_home_mid_rewind_stops_that_file(workspace, tmp_path, monkeypatch, way):
    # The attack: an agent's background process waits for the person's rewind to start,
    # then swaps a folder of the run for a link to $HOME; the rewind then wrote the agent's
    # journaled payload into the real ~/.bashrc. The swap comes between the checks and the write
    # (after the first file is put back), deterministically.
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("the person's own\n")
    (workspace / "first.txt").write_text("first before\n")
    (workspace / "conf").mkdir()
    (workspace / "conf" / ".bashrc").write_text("the agent's payload\n")
    journal = Journal(workspace)
    run = journal.start_run("agent")
    for name in ("first.txt", "conf/.bashrc"):
        run.before_change(workspace / name)
        (workspace / name).write_text("changed by the run\n")
    run.finish()
    real = restore._put_back

    def swapped_after_the_first(own, ws, relative, entry, data):
        real(own, ws, relative, entry, data)
        if relative == "first.txt":
            os.rename(workspace / "conf", workspace / "conf.away")
            os.symlink(home, workspace / "conf")

    monkeypatch.setattr(restore, "_put_back", swapped_after_the_first)
    done = rewind(journal, run.id)
    assert (home / ".bashrc").read_text() == "the person's own\n"
    assert sorted(p.name for p in home.iterdir()) == [".bashrc"]  # not even a temporary file
    assert done.restored == ("first.txt",) and (workspace / "first.txt").read_text() == "first before\n"
    [failed] = done.failed
    assert failed.startswith("conf/.bashrc: a folder on its way (conf) is a link")
    assert "NOT restored, stopped: conf/.bashrc: a folder on its way (conf) is a link" in describe_rewind(done)
    assert (workspace / "conf.away" / ".bashrc").read_text() == "changed by the run\n"


def test_a_file_swapped_for_a_link_is_replaced_not_written_through(workspace, tmp_path, way):
    outside = tmp_path / "outside.txt"
    outside.write_text("not the workspace's\n")
    (workspace / "f.txt").write_text("before\n")
    journal = Journal(workspace)
    run = journal.start_run("cell")
    run.before_change(workspace / "f.txt")
    (workspace / "f.txt").unlink()
    run.finish()
    (workspace / "f.txt").symlink_to(outside)
    rewind(journal, run.id, force=True)
    assert outside.read_text() == "not the workspace's\n"
    assert not (workspace / "f.txt").is_symlink() and (workspace / "f.txt").read_text() == "before\n"


def test_a_deleted_nested_folder_is_made_again_below_the_workspace(workspace, way):
    (workspace / "a" / "b" / "c").mkdir(parents=True)
    (workspace / "a" / "b" / "c" / "deep.txt").write_bytes(b"deep\n")
    os.chmod(workspace / "a" / "b" / "c" / "deep.txt", 0o604)
    journal = Journal(workspace)
    run = journal.start_run("cell")
    run.before_change(workspace / "a" / "b" / "c" / "deep.txt")
    (workspace / "a" / "b" / "c" / "deep.txt").unlink()
    for folder in ("a/b/c", "a/b", "a"):
        (workspace / folder).rmdir()
    run.finish()
    rewind(journal, run.id)
    deep = workspace / "a" / "b" / "c" / "deep.txt"
    assert deep.read_bytes() == b"deep\n" and deep.stat().st_mode & 0o777 == 0o604


def test_folder_beneath_refuses_every_link_on_the_way(workspace, tmp_path, way):
    (workspace / "real" / "sub").mkdir(parents=True)
    (workspace / "inside-link").symlink_to(workspace / "real")  # a link, even one that stays inside
    (workspace / "a-file").write_text("x")
    root = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.close(folder_beneath(root, "real/sub"))
        for relative in ("inside-link/sub", "a-file/x"):
            with pytest.raises(LinkOnTheWay):
                folder_beneath(root, relative, create=True)
        with pytest.raises(FileNotFoundError):
            folder_beneath(root, "real/missing")
        os.close(folder_beneath(root, "real/made/here", create=True))
        assert (workspace / "real" / "made" / "here").is_dir()
        assert not (tmp_path / "real").exists()
    finally:
        os.close(root)
