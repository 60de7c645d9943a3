"""The walk that finds the links already in a workspace (toolkernel/_approval/_links.py), kept
between runs: a folder that has not moved is not listed again, and any change shows."""

from __future__ import annotations

import os

import pytest

from toolkernel._approval import _links
from toolkernel._approval._links import LinkScan, links_to_mount


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.setattr(_links, "_SETTLED_NS", 0)  # trust timestamps at once, to see what is kept
    for folder in ("a/b/c", "d", "skip/inner"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "a" / "b" / "up").symlink_to("..")
    (tmp_path / "skip" / "inner" / "me").symlink_to("..")
    return tmp_path


def names(root, found):
    return sorted(os.path.relpath(path, root) for path in found)


def test_links_are_found_below_every_folder_but_the_skipped(tree):
    found = LinkScan().links(str(tree), {str(tree / "skip")})
    assert names(tree, found) == ["a/b/up"]


def test_an_unchanged_folder_is_not_listed_again_and_a_changed_one_is(tree, monkeypatch):
    scan = LinkScan()
    scan.links(str(tree))
    listed = []
    real_list = _links._list
    monkeypatch.setattr(_links, "_list", lambda folder, status: listed.append(folder) or real_list(folder, status))
    assert names(tree, scan.links(str(tree))) == ["a/b/up", "skip/inner/me"]
    assert listed == []
    (tree / "a" / "b" / "c" / "new").symlink_to(".")
    (tree / "d").rmdir()
    (tree / "d").symlink_to("a")
    assert names(tree, scan.links(str(tree))) == ["a/b/c/new", "a/b/up", "d", "skip/inner/me"]
    assert sorted(os.path.relpath(f, tree) for f in listed) == [".", "a/b/c"]


def test_every_link_gets_a_mount_and_only_one_to_a_folder_inside_shows_it(tree, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside")
    (tree / "out").symlink_to(outside)
    (tree / "file.txt").write_text("x")
    (tree / "to-file").symlink_to("file.txt")
    (tree / "nothing").symlink_to("not-yet")
    mounts = {os.path.relpath(path, tree): real for path, real in links_to_mount(tree, [tree / "skip"])}
    assert mounts == {"a/b/up": True, "nothing": False, "out": False, "to-file": False}
