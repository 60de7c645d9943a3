"""toolkernel's own folders in the workspace (`.toolkernel/` and what is in it, `tool-images/`)
are opened name by name without following links: a cloned repository can put a link where
one goes, and nothing toolkernel writes, reads or deletes there may follow it out."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from approval_helpers import CollectingSink
from toolkernel._approval._approvals import ApprovalStore
from toolkernel._approval._pending import PendingError, PendingStore
from toolkernel._approval._policy import CallInfo
from toolkernel._command._render import render
from toolkernel._errors import ConfigError
from toolkernel._providers._tool_lists import ToolLists
from toolkernel._saved import remove_old, save
from toolkernel._session import Session
from toolkernel._tool import Image, Tool, ToolResult

WEEKS_AGO = time.time() - 30 * 24 * 3600


@pytest.fixture
def victim(tmp_path) -> Path:
    """A folder outside the workspace, with a month-old file the person cares about."""
    folder = tmp_path / "victim"
    folder.mkdir()
    (folder / "thesis.txt").write_text("precious\n")
    os.utime(folder / "thesis.txt", (WEEKS_AGO, WEEKS_AGO))
    return folder


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("TOOLKERNEL_ADMIN_CONFIG", str(tmp_path / "no-admin.toml"))
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


def untouched(victim: Path) -> bool:
    return sorted(p.name for p in victim.iterdir()) == ["thesis.txt"] and (victim / "thesis.txt").read_text() == "precious\n"


@pytest.mark.parametrize("link", [".toolkernel/outputs", ".toolkernel"])
def test_the_clean_up_of_old_outputs_deletes_nothing_through_a_link(work, victim, link):
    (work / ".toolkernel").mkdir(exist_ok=True)
    (victim / "outputs").mkdir()
    (victim / "outputs" / "old.txt").write_text("old")
    os.utime(victim / "outputs" / "old.txt", (WEEKS_AGO, WEEKS_AGO))
    if link == ".toolkernel":
        (work / ".toolkernel").rmdir()
    (work / link).symlink_to(victim)
    assert remove_old(work) == 0
    assert (victim / "thesis.txt").exists() and (victim / "outputs" / "old.txt").exists()
    Session(work).close()  # a session's start cleans up too
    assert (victim / "thesis.txt").exists() and (victim / "outputs" / "old.txt").exists()


def test_old_outputs_in_the_real_folder_still_go(work):
    outputs = work / ".toolkernel" / "outputs"
    outputs.mkdir(parents=True)
    (outputs / "old.txt").write_text("old")
    (outputs / "new.txt").write_text("new")
    os.utime(outputs / "old.txt", (WEEKS_AGO, WEEKS_AGO))
    assert remove_old(work) == 1
    assert sorted(p.name for p in outputs.iterdir()) == ["new.txt"]


def test_a_large_output_with_a_linked_outputs_folder_says_it_could_not_be_saved(work, victim):
    (work / ".toolkernel").mkdir()
    (work / ".toolkernel" / "outputs").symlink_to(victim)
    session = Session(work)
    try:
        sink = CollectingSink()
        result = session.run_script("seq 1 90000; seq 1 90000", sink)
    finally:
        session.close()
    assert untouched(victim)
    assert result.saved_output is None
    assert "the whole output could not be saved" in result.stdout and "is a link" in result.stdout
    assert result.stdout.endswith("89999\n90000\n")  # the tail is still shown
    with pytest.raises(OSError):
        save(work, "text")
    assert untouched(victim)


def test_an_image_is_not_saved_through_a_linked_tool_images_folder(work, victim):
    (work / "tool-images").symlink_to(victim)
    tool = Tool("shot", "", {"type": "object"}, None)
    rendered = render(ToolResult(images=[Image(b"\x89PNG\r\n\x1a\nxx")]), work, tool)
    assert rendered.unsaved is not None and "is a link" in rendered.unsaved and not rendered.images
    assert untouched(victim)
    (work / "tool-images").unlink()
    saved = render(ToolResult(images=[Image(b"\x89PNG\r\n\x1a\nxx")]), work, tool)
    assert saved.unsaved is None and (work / saved.images[0]).read_bytes().startswith(b"\x89PNG")


def test_approvals_are_neither_read_nor_written_through_a_linked_state_folder(work, victim):
    (victim / "approvals.json").write_text('{"version": 1, "allow": ["write_file"]}')
    os.chmod(victim / "approvals.json", 0o600)
    (work / ".toolkernel").symlink_to(victim)
    store = ApprovalStore(work)
    with pytest.raises(ConfigError):
        store.lasting_rules()
    with pytest.raises(ConfigError):
        store.always_allow("read_file")
    assert sorted(p.name for p in victim.iterdir()) == ["approvals.json", "thesis.txt"]


def test_pending_requests_are_not_read_written_or_deleted_through_a_link(work, victim):
    store = PendingStore(work)
    store.folder.parent.mkdir(parents=True, exist_ok=True)
    store.folder.symlink_to(victim)
    call = CallInfo(qualified_name="write_file", command="write-file", input={"path": "x"}, kind="edit")
    with pytest.raises(PendingError):
        store.publish(call, "asked")
    (victim / "abcdefabcdef.json").write_text("{}")
    os.chmod(victim / "abcdefabcdef.json", 0o600)
    assert store.waiting() == ([], [])
    store.withdraw("abcdefabcdef")
    assert (victim / "abcdefabcdef.json").exists() and (victim / "thesis.txt").exists()


def test_kept_tool_lists_are_not_read_or_written_through_a_link(work, victim):
    (work / ".toolkernel").symlink_to(victim)
    lists = ToolLists(work / ".toolkernel")
    cfg = SimpleNamespace(name="docs", fingerprint="f1")
    lists.keep(cfg, [Tool("search", "Finds docs.", {"type": "object"}, None)])
    assert untouched(victim)
    (victim / "tool-lists.json").write_text(
        '{"version": 1, "servers": {"docs": {"config": "f1", "tools": [["search", "planted"]]}}}')
    assert lists.kept(cfg) is None
