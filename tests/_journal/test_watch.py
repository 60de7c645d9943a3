"""The kernel's knowledge of the workspace between runs: inotify, and the walk where watching is
impossible (`_journal/_watch.py`, issue 44 item 1)."""

from __future__ import annotations

import errno
import re
import os
import shutil
from pathlib import Path

import pytest

import toolkernel._journal._watch as watch
from toolkernel._config._rewind import RewindLimits
from toolkernel._journal._ignore import Ignores
from toolkernel._journal._scan import walk
from toolkernel._journal._watch import Workspace


def _tree(root: Path) -> None:
    for folder in ("data/d1", "data/d2/deep", "src", "env/lib", "node_modules/x"):
        (root / folder).mkdir(parents=True)
    for path in ("data/d1/a.csv", "data/d1/b.csv", "data/d2/deep/c.csv", "src/m.py", "top.txt", "env/lib/site.py",
                 "node_modules/x/i.js"):
        (root / path).write_text(path)
    (root / "env" / "pyvenv.cfg").write_text("home = /usr\n")


def _workspace(root: Path, **kwargs) -> Workspace:
    return Workspace(str(root), Ignores(str(root), RewindLimits(), {"HOME": "/nonexistent"}), **kwargs)


def _kinds(changes) -> dict[str, str]:
    return {path: "created" if was is None else "deleted" if now is None else "changed"
            for path, (was, now) in changes.items()}


def _edit(root: Path) -> None:
    (root / "data" / "d1" / "a.csv").write_text("changed")
    (root / "top.txt").unlink()
    os.rename(root / "data" / "d2", root / "data" / "d2moved")
    shutil.rmtree(root / "src")
    (root / "new" / "sub").mkdir(parents=True)
    (root / "new" / "sub" / "n.txt").write_text("n")
    (root / "env" / "lib" / "more.py").write_text("left out")
    (root / "node_modules" / "y.js").write_text("left out")


_EXPECTED = {"data/d1/a.csv": "changed", "top.txt": "deleted", "data/d2/deep/c.csv": "deleted",
             "data/d2moved/deep/c.csv": "created", "src/m.py": "deleted", "new/sub/n.txt": "created"}


@pytest.mark.parametrize("how", ["inotify", "walk"])
def test_a_look_finds_what_changed_since_the_last_and_nothing_left_out(tmp_path, how):
    root = tmp_path / "ws"
    _tree(root)
    workspace = _workspace(root, watch=how == "inotify")
    try:
        assert workspace.look() == {}  # the first look learns the workspace
        assert set(workspace.files) == {"data/d1/a.csv", "data/d1/b.csv", "data/d2/deep/c.csv", "src/m.py", "top.txt"}
        if how == "inotify" and watch.INotify is None:
            pytest.skip("no inotify here")
        assert workspace.look() == {}
        _edit(root)
        assert _kinds(workspace.look()) == _EXPECTED
        assert workspace.files == walk(str(root), workspace.ignores)  # as a walk would find it now
        (root / "data" / "d2moved" / "deep" / "c.csv").write_text("in the moved folder")
        assert _kinds(workspace.look()) == {"data/d2moved/deep/c.csv": "changed"}
        lines = workspace.doctor_lines()
        assert ("watches the workspace with inotify" in lines[0]) == (how == "inotify")
        assert ("walks the workspace at each shell run" in lines[0]) == (how == "walk")
    finally:
        workspace.close()


def test_a_queue_that_overflowed_is_walked_again_and_nothing_is_missed(tmp_path, monkeypatch):
    if watch.INotify is None:
        pytest.skip("no inotify here")
    root = tmp_path / "ws"
    _tree(root)
    workspace = _workspace(root)
    try:
        workspace.look()
        _edit(root)
        monkeypatch.setattr(workspace, "_drain", lambda: None)  # IN_Q_OVERFLOW: events were lost
        assert _kinds(workspace.look()) == _EXPECTED
        assert workspace.rescans == 1 and "overflowed" in "\n".join(workspace.doctor_lines())
        monkeypatch.undo()
        (root / "data" / "d1" / "b.csv").write_text("after the rescan")  # still watched
        assert _kinds(workspace.look()) == {"data/d1/b.csv": "changed"}
    finally:
        workspace.close()


def test_folders_past_the_watch_limit_are_listed_at_each_look(tmp_path, monkeypatch):
    if watch.INotify is None:
        pytest.skip("no inotify here")
    root = tmp_path / "ws"
    _tree(root)
    workspace = _workspace(root)
    real = watch.INotify.add_watch
    allowed = [3]  # the top and two more: the rest meet the limit

    def limited(self, path, mask):
        if allowed[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        allowed[0] -= 1
        return real(self, path, mask)

    monkeypatch.setattr(watch.INotify, "add_watch", limited)
    try:
        workspace.look()
        assert workspace.unwatched and "watch limit was reached" in workspace.why_walked
        _edit(root)
        assert _kinds(workspace.look()) == _EXPECTED
        assert "folders listed at each shell run instead" in "\n".join(workspace.doctor_lines())
    finally:
        workspace.close()


def test_a_folder_that_becomes_a_virtual_environment_is_left_out(tmp_path):
    if watch.INotify is None:
        pytest.skip("no inotify here")
    root = tmp_path / "ws"
    (root / "tools").mkdir(parents=True)
    (root / "tools" / "a.py").write_text("a")
    workspace = _workspace(root)
    try:
        workspace.look()
        (root / "tools" / "pyvenv.cfg").write_text("home = /usr\n")
        (root / "tools" / "b.py").write_text("b")
        workspace.look()
        assert not any(path.startswith("tools/") for path in workspace.files)
    finally:
        workspace.close()


def test_doctor_says_how_a_kernel_follows_the_workspace(session_with):
    from kernel_helpers import RecordingSink
    from toolkernel._frontends._doctor import doctor

    session = session_with()
    before, _ = doctor(session.workdir, session)
    assert "changes: a kernel watches the workspace with inotify from its first shell run on" in before or \
        watch.INotify is None
    session.run_script("echo hi > made.txt", RecordingSink())
    after, _ = doctor(session.workdir, session)
    line = next(line for line in after.splitlines() if "changes:" in line)
    if watch.INotify is not None:
        assert re.search(r"\[  ok\] changes: watches the workspace with inotify \(\d+ folders, \d+ files", line), line
    else:
        assert "walks the workspace at each shell run" in line
