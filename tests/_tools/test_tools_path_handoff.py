"""A path argument is resolved once per call: the dispatcher's checks judge the real path,
and the tool opens that same path (`ToolContext.real`). Real files, real symlinks, real
scripts in Bashkit through a Session."""

from __future__ import annotations

import json
import os
import threading

import nbformat
import pytest
from nbformat.v4 import new_markdown_cell, new_notebook

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
    calls = []  # the paths `real_name` was asked for: one per call
    inside = threading.local()

    def counting(resolve):
        def counted(*args, **kwargs):
            found = resolve(*args, **kwargs)
            # A look that did not answer hands the path on to the next way. Only looks made for a
            # call count: the walks for links and repositories before and after a run resolve the
            # links they find for a purpose of their own.
            if found is not None and getattr(inside, "call", False):
                resolved.append(os.path.join(*map(os.fspath, args)))
            return found
        return counted

    real_name = _paths.real_name

    def name_for_a_call(value, *args, **kwargs):
        calls.append(value)
        inside.call = True
        try:
            return real_name(value, *args, **kwargs)
        finally:
            inside.call = False

    # The three ways a path is resolved: a plain name's one look (a link is not taken there),
    # the kernel's (one open in /proc) and realpath.
    monkeypatch.setattr(_paths, "real_name", name_for_a_call)
    monkeypatch.setattr(_paths, "_plain_name", counting(_paths._plain_name))
    monkeypatch.setattr(_paths, "_kernel_real", counting(_paths._kernel_real))
    monkeypatch.setattr(os.path, "realpath", counting(os.path.realpath))
    # Built at run time: the advisory check before the start (which resolves literal calls
    # to decide whether to ask first) does not see them.
    result, err = run(session, "for f in inside.txt link.txt; do tools read-file path=$f; done")
    assert result.exit_code == 0, err
    # Each call's path is resolved once, by one of the ways.
    assert calls == ["inside.txt", "link.txt"]
    assert resolved == [str(session.workdir / name) for name in ("inside.txt", "link.txt")]


def test_a_plain_name_that_is_a_link_out_is_judged_where_it_leads(session, tmp_path):
    """A plain name takes one look in the workspace (`_paths._plain_name`); a link there is
    resolved by the kernel, so a link to a file outside is a call outside the workspace."""
    (session.workdir / "out.txt").symlink_to(tmp_path / "secret.txt")
    result, err = run(session, "p=out.txt; tools read-file path=$p")  # built at run time: no check before the start
    assert result.exit_code != 0
    assert "secret" not in result.stdout and "outside the workspace" in err


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


# A folder on the way swapped for a link after the checks: the real path the checks judged
# now leads out of the workspace. The open must notice, not follow.


@pytest.fixture
def swappable(session, tmp_path):
    """`sub/note.txt` and `sub/note.ipynb` in the workspace, the same names outside, and a swap
    of `sub` for a link there."""
    work = session.workdir
    (work / "sub").mkdir()
    (work / "sub" / "note.txt").write_text("inside note\n")
    nbformat.write(new_notebook(cells=[new_markdown_cell("inside notebook")]), work / "sub" / "note.ipynb")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "note.txt").write_text("the secret outside the workspace\n")
    nbformat.write(new_notebook(cells=[new_markdown_cell("the secret notebook")]), outside / "note.ipynb")

    def swap(call):  # runs after the path was judged, before the tool opens it
        (work / "sub").rename(work / "sub.moved")
        (work / "sub").symlink_to(outside)
        return HookOutcome("allow", "edits inside the workspace are fine here")
    return swap, outside


@pytest.mark.parametrize("tool, script", [
    ("read_file", "tools read-file path=sub/note.txt"),
    ("notebook_read", "tools notebook-read notebook_path=sub/note.ipynb"),
])
def test_a_folder_swapped_after_the_checks_does_not_redirect_the_read(session, swappable, tool, script):
    swap, _ = swappable
    session.hooks.before_call(tool)(swap)
    result, err = run(session, script)
    assert result.exit_code == 1
    assert "secret" not in result.stdout + err
    assert "changed while it was being opened" in err


@pytest.mark.parametrize("tool, script", [
    ("write_file", "p=sub/note.txt; tools write-file path=$p content=changed"),
    ("edit_file", "p=sub/note.txt; tools edit-file path=$p old_string=secret new_string=changed"),
    # A new notebook: nothing outside to compare with, so only the checked folder stops it.
    ("notebook_edit", "p=sub/new.ipynb; tools notebook-edit notebook_path=$p edit_mode=insert cell_type=code "
                      "new_source=changed"),
])
def test_a_folder_swapped_after_the_checks_does_not_redirect_the_write(session, swappable, tool, script):
    swap, outside = swappable
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    session.hooks.before_call(tool)(swap)
    result, err = run(session, script)
    assert result.exit_code == 1, err
    assert "changed while it was being" in err and "nothing was" in err
    # Nothing changed outside, and no file (a temporary one included) was made there.
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before
    assert (session.workdir / "sub.moved" / "note.txt").read_text() == "inside note\n"



@pytest.mark.parametrize("engine", ["rg", "builtin"])
def test_a_searched_folder_swapped_after_the_checks_is_not_searched(session, tmp_path, engine, monkeypatch):
    import shutil
    monkeypatch.setenv("TOOLKERNEL_TRUST_ALL", "1")  # the [tools] table below is the test's own
    if engine == "rg" and shutil.which("rg") is None:
        pytest.skip("rg is not installed here (CI installs it)")
    work = session.workdir
    (work / "toolkernel.toml").write_text(f'[tools.grep_search]\nengine = "{engine}"\n')
    (work / "docs").mkdir()
    (work / "docs" / "a.md").write_text("needle inside\n")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "b.md").write_text("needle outside\n")

    @session.hooks.before_call("grep_search")
    def swap(call):  # the real folder itself, not a link to it, is replaced
        (work / "docs").rename(work / "docs.moved")
        (work / "docs").symlink_to(tmp_path / "elsewhere")

    result, err = run(session, "tools grep-search pattern=needle path=docs output_mode=content")
    assert "outside" not in result.stdout + err
    assert result.exit_code == 1 and "changed before the search started" in err


def test_a_folder_swapped_during_a_glob_walk_is_not_listed(tmp_path):
    # glob_search walks from open folder to open folder (os.fwalk): a folder swapped for a link
    # out of the workspace after the walk has listed it is not followed. By names, as before,
    # the walk listed the outside folder's files as if they were the workspace's.
    from toolkernel._providers._tools.search import glob_search
    from toolkernel._tool import ToolContext

    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "inside.txt").write_text("x")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret-name.txt").write_text("x")
    swapped = []

    def swap_once() -> bool:  # the walk asks after listing each folder: the root comes first
        if not swapped:
            (work / "sub").rename(work / "sub.moved")
            (work / "sub").symlink_to(tmp_path / "outside")
            swapped.append(True)
        return False

    ctx = ToolContext(workdir=work, cancelled=swap_once)
    result = glob_search.call_now({"pattern": "**/*.txt"}, ctx)
    assert swapped and not result.is_error
    assert "secret-name" not in result.texts[0]


# A rule's pattern on a path argument is matched where the path leads, as the checks resolved it:
# `./`, `..`, an absolute path and a link do not get a file past a deny rule, nor into an allow rule.


@pytest.fixture
def ruled(tmp_path, monkeypatch):
    """A workspace with `secrets/x`, `src/app.py` and `notes/`, links into `secrets/` and `src/`, and a
    Session under the policy `write(policy)` puts in its toolkernel.toml."""
    from approval_helpers import policy_section, write_project

    monkeypatch.setenv("TOOLKERNEL_TRUST_ALL", "1")  # the [policy] below is the test's own
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("TOOLKERNEL_ADMIN_CONFIG", str(tmp_path / "no-admin.toml"))
    work = tmp_path / "work"
    for folder in ("secrets", "src", "notes"):
        (work / folder).mkdir(parents=True)
    (work / "secrets" / "x").write_text("the secret\n")
    (work / "src" / "app.py").write_text("original\n")
    (work / "peek").symlink_to(work / "secrets" / "x")
    (work / "notes" / "app-link").symlink_to(work / "src" / "app.py")
    sessions = []

    def write(**policy) -> Session:
        write_project(work, policy_section(**policy))
        sessions.append(Session(work))
        return sessions[-1]

    yield write
    for opened in sessions:
        opened.close()


def spellings(work, name: str, link: str) -> list[str]:
    return [f"./{name}", f"notes/../{name}", str(work / name), link]


POLICY = {"mode": "accept-edits", "deny": ["read-file(path=secrets/*)", "write-file(path=src/*)"]}


@pytest.mark.parametrize("spelled", range(4))
def test_a_deny_rule_on_a_path_is_not_read_past_by_another_spelling(ruled, spelled):
    session = ruled(**POLICY)
    path = spellings(session.workdir, "secrets/x", "peek")[spelled]
    result, err = run(session, f"tools read-file path={path}")
    assert result.exit_code != 0 and "the secret" not in result.stdout + err
    assert "denied by the rule 'read-file(path=secrets/*)'" in err, err
    result, err = run(session, "tools read-file path=notes/../src/app.py")  # the control
    assert result.exit_code == 0 and "original" in result.stdout, err


@pytest.mark.parametrize("spelled", range(4))
def test_a_deny_rule_on_a_path_is_not_written_past_by_another_spelling(ruled, spelled):
    session = ruled(**POLICY)
    work = session.workdir
    path = spellings(work, "src/app.py", "notes/app-link")[spelled]
    result, err = run(session, f"tools write-file path={path} content=changed")
    assert result.exit_code != 0 and "denied by the rule 'write-file(path=src/*)'" in err, err
    assert (work / "src" / "app.py").read_text() == "original\n"
    result, err = run(session, "tools write-file path=notes/new.md content=fine")  # the control
    assert result.exit_code == 0 and (work / "notes" / "new.md").read_text() == "fine", err


@pytest.mark.parametrize("path", ["notes/../src/app.py", "notes/app-link"])
def test_an_allow_rule_on_a_path_does_not_allow_a_path_that_leads_elsewhere(ruled, path):
    session = ruled(allow=["write-file(path=notes/*)"])
    work = session.workdir
    result, err = run(session, f"tools write-file path={path} content=changed")
    assert result.exit_code != 0 and "needs_approval" in err + result.stdout, err
    assert (work / "src" / "app.py").read_text() == "original\n"
    result, err = run(session, "tools write-file path=./notes/new.md content=fine")  # the control
    assert result.exit_code == 0 and (work / "notes" / "new.md").read_text() == "fine", err



# Quoted, the `~` reaches read-file (which takes it for the home folder); the shell would give it the sandbox's.
@pytest.mark.parametrize("spelled", ["{home}/.ssh/id", "'~/.ssh/id'", "{home}/keys/id"])
def test_a_deny_rule_on_a_path_under_the_home_folder_is_written_with_a_tilde(ruled, tmp_path, monkeypatch, spelled):
    # `~` in the rule named nothing: the call outside the workspace asked instead of being denied,
    # and a person could allow it (bypass-permissions would not even ask about the rule's path).
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id").write_text("the private key\n")
    (home / "keys").symlink_to(home / ".ssh")  # where it leads counts, as for every path rule
    monkeypatch.setenv("HOME", str(home))
    session = ruled(deny=["read-file(path=~/.ssh/*)"])
    result, err = run(session, f"tools read-file 'path='{spelled.format(home=home)}")
    assert result.exit_code != 0 and "the private key" not in result.stdout + err
    assert "denied by the rule 'read-file(path=~/.ssh/*)'" in err, err


@pytest.mark.parametrize("call", [
    """tools read-file '{"path": "in\\u0000side.txt"}'""",  # literal: looked at before the start too
    """echo '{"path": "in\\u0000side.txt"}' | tools read-file""",
    """tools write-file '{"path": "new\\u0000.txt", "content": "x"}'""",
    """tools notebook-read '{"notebook_path": "a\\u0000.ipynb"}'""",
])
def test_a_path_holding_a_nul_is_invalid_input_and_the_script_goes_on(session, call):
    # No file name holds one: the system calls refuse it, and a literal call's look before
    # the start once ended the whole script ("the shell failed: ValueError").
    result, err = run(session, f"{call}; echo \"status $?\"")
    assert result.exit_code == 0, err
    assert json.loads(err)["error"]["code"] == "invalid_input" and "NUL" in err, err
    assert result.held_stdout == "status 1\n"
