import os
from pathlib import Path

import pytest

from toolkernel._providers._tools import outside_workspace
from toolkernel._providers._tools._paths import display_path, real_name, resolve_real
from toolkernel._providers._tools.files import read_file
from toolkernel._providers._tools.search import grep_search
from toolkernel._providers._tools.web import web_fetch


def test_inside_paths(tmp_path):
    (tmp_path / "sub").mkdir()
    assert not outside_workspace(read_file, {"path": "sub/a.txt"}, tmp_path)
    assert not outside_workspace(read_file, {"path": "sub/../new/deeper/x.txt"}, tmp_path)  # not yet existing
    assert not outside_workspace(read_file, {"path": str(tmp_path / "sub" / "a.txt")}, tmp_path)
    assert not outside_workspace(read_file, {"path": "."}, tmp_path)
    assert not outside_workspace(grep_search, {"pattern": "x"}, tmp_path)  # default path: the workspace


def test_dotdot_and_absolute_paths_leave(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    assert outside_workspace(read_file, {"path": "../secret.txt"}, work)
    assert outside_workspace(read_file, {"path": "sub/../../x"}, work)
    assert outside_workspace(read_file, {"path": "/etc/passwd"}, work)
    assert outside_workspace(grep_search, {"pattern": "x", "path": ".."}, work)
    # a sibling whose name starts with the workspace's name is still outside
    assert outside_workspace(read_file, {"path": str(tmp_path / "work2" / "f")}, work)


def test_symlink_pointing_out(tmp_path):
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    (work / "out").symlink_to(elsewhere)
    (work / "file_link").symlink_to(elsewhere / "f.txt")
    assert outside_workspace(read_file, {"path": "out/new_file.txt"}, work)  # file does not exist yet
    assert outside_workspace(read_file, {"path": "file_link"}, work)
    (work / "in").symlink_to(work / "real")
    assert not outside_workspace(read_file, {"path": "in/x"}, work)


def test_workdir_reached_through_a_symlink(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    alias = tmp_path / "alias"
    alias.symlink_to(real)
    assert not outside_workspace(read_file, {"path": "a.txt"}, alias)
    assert not outside_workspace(read_file, {"path": str(real / "a.txt")}, alias)


def test_tools_without_path_keys_never_leave(tmp_path):
    assert not outside_workspace(web_fetch, {"url": "file:///etc/passwd"}, tmp_path)


@pytest.mark.parametrize("value", [
    "file.txt", "file_link", "dir_link/../file.txt", "dir_link/inner.txt", "dir_link/",
    "new.txt", "new_dir/x/y.txt", "dangling", "dangling/../file.txt", "loop", "file.txt/",
    "file.txt/..", ".", "..", "/", "missing_link_dir/../file.txt", "~no_such_user_here/file.txt",
])
def test_a_path_resolves_as_realpath_resolves_it(tmp_path, value):
    """The kernel's resolution (an O_PATH open named in /proc) gives what realpath gives,
    symlinks, `..` after a symlink, paths not there yet and broken links alike."""
    work, other = tmp_path / "work", tmp_path / "other"
    work.mkdir()
    other.mkdir()
    (work / "file.txt").write_text("x\n")
    (other / "inner.txt").write_text("y\n")
    (work / "file_link").symlink_to(work / "file.txt")
    (work / "dir_link").symlink_to(other)
    (work / "dangling").symlink_to(tmp_path / "nowhere")
    (work / "loop").symlink_to(work / "loop")
    (work / "missing_link_dir").symlink_to(other / "gone")
    expected = Path(os.path.realpath(os.path.join(work, os.path.expanduser(value))))
    assert resolve_real(value, work) == expected
    # With the workspace's real path at hand (as the dispatcher has it), a plain name takes one
    # look (`_plain_name`), a link among them not: the same answer either way.
    found = real_name(value, work, os.path.realpath(work))
    assert Path(found) == expected
    if "/" not in value and expected.exists():  # the file judged, for the checked open (`Resolved.identity`)
        status = os.stat(expected)
        assert found.identity == (status.st_dev, status.st_ino)


def test_a_plain_name_is_joined_to_the_real_root_not_to_the_workdir_as_written(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "a.txt").write_text("x\n")
    (tmp_path / "alias").symlink_to(real)
    assert real_name("a.txt", tmp_path / "alias", str(real)) == str(real / "a.txt")
    assert real_name("a b\u202e.txt", tmp_path / "alias", str(real)) == str(real / "a b\u202e.txt")  # not there yet
    assert real_name("a.txt", Path("/"), "/") == "/a.txt"


def test_a_swapped_symlink_is_seen_on_the_next_resolution(tmp_path):
    work, other = tmp_path / "work", tmp_path / "other"
    work.mkdir()
    other.mkdir()
    (work / "link").symlink_to(work)
    assert resolve_real("link/f", work) == work / "f"
    (work / "link").unlink()
    (work / "link").symlink_to(other)
    assert resolve_real("link/f", work) == other / "f"


def test_display_path(tmp_path):
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    (tmp_path / "via").symlink_to(real)
    assert display_path(real / "sub" / "a.txt", real) == "sub/a.txt"
    assert display_path(real, real) == "."
    assert display_path(real / "sub" / "a.txt", tmp_path / "via") == "sub/a.txt"  # the workdir's real path
    assert display_path(tmp_path / "realx" / "a.txt", real) == str(tmp_path / "realx" / "a.txt")
    assert display_path(Path("/etc/passwd"), Path("/")) == "etc/passwd"


def test_a_path_resolves_against_the_root_folder_and_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "notes.txt").write_text("x\n")
    assert resolve_real("etc", Path("/")) == Path(os.path.realpath("/etc"))
    assert resolve_real("~/notes.txt", Path("/")) == Path(os.path.realpath(tmp_path / "notes.txt"))


def test_a_path_no_file_name_can_hold_is_invalid_input(tmp_path):
    # Input that did not come through the command line (a `serve` client's JSON) reaches the
    # path resolution as it is: a NUL or half a surrogate pair is refused there, by key.
    from toolkernel._errors import InvalidInput
    from toolkernel._providers._tools._paths import real_paths

    for bad in ("a\0b", "a\ud800b"):
        with pytest.raises(InvalidInput, match="'path' holds a NUL character or half a surrogate pair"):
            real_paths(read_file, {"path": bad}, tmp_path)
    # A name's own undecodable byte, as Python lists it (surrogateescape), still names the file.
    name = os.fsdecode(b"data-\xff.txt")
    (tmp_path / name).write_text("x")
    assert real_paths(read_file, {"path": name}, tmp_path) == {"path": str(tmp_path / name)}
