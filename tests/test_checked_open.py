"""`open_checked`: a path resolved and checked earlier opens only as that very file. Real
files, real links, real folder swaps."""

from __future__ import annotations

import os

import pytest

from toolkernel import _checked_open
from toolkernel._checked_open import PathChanged, open_checked, read_checked


@pytest.fixture
def tree(tmp_path):
    """work/sub/note.txt inside; outside/note.txt with a secret; real paths as strings."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "sub").mkdir(parents=True)
    outside.mkdir()
    (work / "sub" / "note.txt").write_text("inside\n")
    (outside / "note.txt").write_text("secret\n")
    return work.resolve(), outside.resolve()


def swap_for_link(folder, target):
    folder.rename(folder.with_name(folder.name + ".moved"))
    folder.symlink_to(target)


def test_the_checked_path_opens_as_it_was(tree):
    work, _ = tree
    assert read_checked(str(work / "sub" / "note.txt")) == b"inside\n"
    assert read_checked(str(work / "sub" / "note.txt"), inside=str(work)) == b"inside\n"


def test_a_folder_swapped_for_a_link_is_refused(tree):
    work, outside = tree
    checked = str(work / "sub" / "note.txt")
    swap_for_link(work / "sub", outside)
    with pytest.raises(PathChanged):
        read_checked(checked)
    with pytest.raises(PathChanged):
        read_checked(checked, inside=str(work))


def test_a_link_in_the_last_name_is_refused(tree):
    work, outside = tree
    link = work / "sub" / "link.txt"
    link.symlink_to(outside / "note.txt")
    with pytest.raises(PathChanged):
        read_checked(str(link))


def test_inside_takes_any_file_in_the_folder_and_nothing_outside_it(tree):
    work, outside = tree
    (work / "sub" / "deeper").mkdir()
    (work / "sub" / "deeper" / "x.txt").write_text("x")
    assert read_checked(str(work / "sub" / "deeper" / "x.txt"), inside=str(work / "sub")) == b"x"
    (work / "subway").mkdir()  # a sibling whose name starts like the folder's is not in it
    (work / "subway" / "y.txt").write_text("y")
    with pytest.raises(PathChanged):
        read_checked(str(work / "subway" / "y.txt"), inside=str(work / "sub"))


def test_a_missing_file_is_not_a_changed_path(tree):
    work, _ = tree
    with pytest.raises(FileNotFoundError):
        read_checked(str(work / "sub" / "absent.txt"))


def test_a_folder_is_refused_without_leaking_its_descriptor(tree):
    work, _ = tree
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(IsADirectoryError):
        read_checked(str(work / "sub"))
    assert len(os.listdir("/proc/self/fd")) == before


def test_without_proc_a_swap_still_in_place_is_refused(tree, monkeypatch):
    work, outside = tree
    monkeypatch.setattr(_checked_open, "opened_name", lambda fd: None)
    checked = str(work / "sub" / "note.txt")
    assert read_checked(checked) == b"inside\n"
    swap_for_link(work / "sub", outside)
    with pytest.raises(PathChanged):
        read_checked(checked)


def test_a_refused_open_closes_its_descriptor(tree):
    work, outside = tree
    checked = str(work / "sub" / "note.txt")
    swap_for_link(work / "sub", outside)
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(PathChanged):
        open_checked(checked)
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_pipe_is_refused_at_once_not_waited_on(tree):
    work, _ = tree
    os.mkfifo(work / "pipe")  # no writer: a plain open would wait for one for ever
    with pytest.raises(_checked_open.NotAFile):
        read_checked(str(work / "pipe"))


# -- a path resolved with the identity of its file (`_paths.real_name`) -------------------------


def resolved(path) -> _checked_open.Resolved:
    from toolkernel._providers._tools._paths import real_name

    name = real_name(str(path), "/")
    assert isinstance(name, _checked_open.Resolved) and name.identity is not None
    return name


def read_regular(path) -> bytes:
    fd, _ = _checked_open.regular_checked(path)
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def test_the_file_the_resolution_found_is_read_without_asking_its_name_again(tree, monkeypatch):
    work, _ = tree
    checked = resolved(work / "sub" / "note.txt")
    monkeypatch.setattr(_checked_open, "opened_name", lambda fd: pytest.fail("the name was asked again"))
    assert read_regular(checked) == b"inside\n"


def test_a_folder_swapped_for_a_link_after_the_resolution_is_refused(tree):
    work, outside = tree
    checked = resolved(work / "sub" / "note.txt")
    swap_for_link(work / "sub", outside)  # the same name now leads to another file: judged by its name
    with pytest.raises(PathChanged):
        read_regular(checked)


def test_a_file_replaced_under_its_name_after_the_resolution_is_judged_by_its_name(tree):
    work, _ = tree
    checked = resolved(work / "sub" / "note.txt")
    (work / "sub" / "new.txt").write_text("saved again\n")
    os.replace(work / "sub" / "new.txt", work / "sub" / "note.txt")  # an editor's atomic save
    assert read_regular(checked) == b"saved again\n"  # as a path without an identity is


def test_the_very_file_judged_is_read_though_its_folder_moved_within_reach(tree):
    work, _ = tree
    checked = resolved(work / "sub" / "note.txt")
    swap_for_link(work / "sub", work / "sub.moved")  # the checked file itself, reached another way
    assert read_regular(checked) == b"inside\n"
