"""A path argument is resolved once per call: the dispatcher's checks judge the real path,
and the tool opens that same path (`ToolContext.real`). Real files, real symlinks, real
scripts in Bashkit through a Session."""

from __future__ import annotations

import os

import pytest

from approval_helpers import CollectingSink
from toolkernel._approval._hooks import HookOutcome
from toolkernel._providers._tools import _paths
from toolkernel._session import Session


@pytest.fixture
def session(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("TOOLKERNEL_ADMIN_CONFIG", str(tmp_path / "no-admin.toml"))
    work = tmp_path / "work"
    work.mkdir()
    (work / "inside.txt").write_text("inside\n")
    (tmp_path / "secret.txt").write_text("the secret outside the workspace\n")
    (work / "link.txt").symlink_to(work / "inside.txt")
    opened = Session(work)
    yield opened
    opened.close()


def run(session: Session, script: str):
    sink = CollectingSink()
    result = session.run_script(script, sink)
    return result, "".join(sink.err)


def test_a_link_swapped_after_the_checks_does_not_redirect_the_read(session, tmp_path):
    work = session.workdir
    swapped = []

    @session.hooks.before_call("read_file")
    def swap(call):  # runs after the path was judged inside the workspace, before the tool
        (work / "link.txt").unlink()
        (work / "link.txt").symlink_to(tmp_path / "secret.txt")
        swapped.append(True)

    result, err = run(session, "tools read-file path=link.txt")
    assert swapped and result.exit_code == 0, err
    assert "inside" in result.stdout and "secret" not in result.stdout


def test_a_link_swapped_after_the_checks_does_not_redirect_the_write(session, tmp_path):
    work = session.workdir

    @session.hooks.before_call("write_file")
    def swap(call):
        (work / "link.txt").unlink()
        (work / "link.txt").symlink_to(tmp_path / "secret.txt")
        return HookOutcome("allow", "edits inside the workspace are fine here")

    # Built at run time, so no check before the start asks: the hook's "allow" decides.
    result, err = run(session, "p=link.txt; tools write-file path=$p content=changed")
    assert result.exit_code == 0, err
    assert (work / "inside.txt").read_text() == "changed"
    assert (tmp_path / "secret.txt").read_text() == "the secret outside the workspace\n"


def test_one_call_resolves_its_path_once(session, monkeypatch):
    run(session, "tools read-file path=inside.txt")  # warm: config, plan, validators
    resolved = []

    def counting(resolve):
        def counted(path, *args, **kwargs):
            resolved.append(os.fspath(path))
            return resolve(path, *args, **kwargs)
        return counted

    # Both ways a path is resolved: the kernel's (one open in /proc) and realpath.
    monkeypatch.setattr(_paths, "_kernel_real", counting(_paths._kernel_real))
    monkeypatch.setattr(os.path, "realpath", counting(os.path.realpath))
    # Built at run time: the advisory check before the start (which resolves literal calls
    # to decide whether to ask first) does not see them.
    result, err = run(session, "for f in inside.txt link.txt; do tools read-file path=$f; done")
    assert result.exit_code == 0, err
    called = [p for p in resolved if p.endswith(("inside.txt", "link.txt"))]
    assert called == [str(session.workdir / "inside.txt"), str(session.workdir / "link.txt")]


def test_the_searches_look_where_the_checks_looked(session, tmp_path):
    work = session.workdir
    (work / "docs").mkdir()
    (work / "docs" / "a.md").write_text("needle inside\n")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "b.md").write_text("needle outside\n")
    (work / "area").symlink_to(work / "docs")

    @session.hooks.before_call("grep_search")
    def swap(call):
        (work / "area").unlink()
        (work / "area").symlink_to(tmp_path / "elsewhere")

    result, err = run(session, "tools grep-search pattern=needle path=area output_mode=content")
    assert result.exit_code == 0, err
    assert "needle inside" in result.stdout and "outside" not in result.stdout
