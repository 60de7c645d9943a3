from toolkernel._providers._tools import outside_workspace
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
