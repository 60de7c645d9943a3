"""The mount plan is kept between runs only while nothing it depends on changed
(toolkernel/_runners/_guard_cache.py). Real files, real symlinks, real config."""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest

from approval_helpers import CollectingSink
from kernel_helpers import without_blanket_trust
from toolkernel._config._config import load_config
from toolkernel._config._trust import TrustStore
from toolkernel._runners import _guard_cache
from toolkernel._approval._protected import Unprotectable, mount_plan
from toolkernel._runners._guard_cache import PlanCache
from toolkernel._session import Session


@pytest.fixture
def work(tmp_path, monkeypatch):
    without_blanket_trust(tmp_path, monkeypatch)
    work = tmp_path / "work"
    (work / "hooks").mkdir(parents=True)
    (work / "hooks" / "guard.sh").write_text("#!/bin/sh\necho '{\"action\": \"allow\"}'\n")
    (work / "toolkernel.toml").write_text(
        '[[hooks]]\nevent = "pre_call"\nmatch = "read_file"\ncommand = ["sh", "hooks/guard.sh"]\n'
        '[mcp_servers.tool]\ncommand = "mytool"\nload = "on-demand"\n'
    )
    TrustStore().trust(work)
    return work


@pytest.fixture
def settled(monkeypatch):
    """Treat every timestamp as settled, so a plan is kept at once (the rule for recent
    changes has its own test)."""
    monkeypatch.setattr(_guard_cache, "_SETTLED_NS", -10**18)


def plan_of(cache: PlanCache, work):
    return cache.plan(work.resolve(), load_config(work))


def test_the_plan_is_kept_while_nothing_changed(work, settled):
    cache, config = PlanCache(), load_config(work)
    first = cache.plan(work, config)
    assert cache.plan(work, config) is first
    assert first == mount_plan(work, config)


def test_a_top_folder_swapped_for_a_symlink_is_seen_at_the_next_run(work, settled):
    cache, config = PlanCache(), load_config(work)
    assert [m.path.name for m in cache.plan(work, config).mounts if m.real] == [".toolkernel", "hooks"]
    os.rename(work / "hooks", work / "elsewhere")
    (work / "hooks").symlink_to("elsewhere")  # the hook now runs from elsewhere/: that folder needs the mount
    after = cache.plan(work, config)
    assert [m.path.name for m in after.mounts if m.real] == [".toolkernel", "elsewhere"]
    assert after == mount_plan(work, config)


def test_a_removed_state_folder_is_made_again(work, settled):
    cache, config = PlanCache(), load_config(work)
    cache.plan(work, config)
    os.rmdir(work / ".toolkernel")
    cache.plan(work, config)
    assert (work / ".toolkernel").is_dir()


def test_a_state_folder_replaced_by_a_symlink_stops_the_next_run(work, settled):
    cache, config = PlanCache(), load_config(work)
    cache.plan(work, config)
    os.rmdir(work / ".toolkernel")
    (work / "elsewhere").mkdir()
    (work / ".toolkernel").symlink_to("elsewhere")
    with pytest.raises(Unprotectable, match="is not a folder"):
        cache.plan(work, config)


def test_a_program_that_appears_earlier_on_path_is_protected(work, settled, tmp_path, monkeypatch):
    system, local, later = tmp_path / "system-bin", work / "bin", work / "later-bin"
    for folder in (system, local, later):
        folder.mkdir()
    program = system / "mytool"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join(map(str, (local, later, system))))
    cache, config = PlanCache(), load_config(work)
    planted = local / "mytool"
    # Every place the start tries before the installed program, none of them there yet.
    assert {planted, later / "mytool"} <= set(cache.plan(work, config).protected)
    assert local not in cache.plan(work, config).protected
    planted.write_text("#!/bin/sh\n")  # not executable yet: the start passes it over
    assert {planted, later / "mytool"} <= set(cache.plan(work, config).protected)
    planted.chmod(0o755)  # the same file, now the program the server starts: no place after it is tried
    protected = cache.plan(work, config).protected
    assert planted.resolve() in protected and later / "mytool" not in protected


def test_a_symlink_on_the_way_retargeted_is_seen(work, settled, tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    link = tmp_path / "cfg"
    link.symlink_to(tmp_path / "a")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(link))
    cache, config = PlanCache(), load_config(work)
    before = cache.plan(work, config)
    link.unlink()
    link.symlink_to(work)  # the user config folder now lies in the workspace
    after = cache.plan(work, config)
    assert after is not before
    assert work.resolve() / "toolkernel" in after.protected


def test_an_environment_change_works_the_plan_out_again(work, settled, monkeypatch):
    cache, config = PlanCache(), load_config(work)
    before = cache.plan(work, config)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(work / "conf"))
    after = cache.plan(work, config)
    assert work.resolve() / "conf" / "toolkernel" in after.protected and after != before


def test_a_new_config_works_the_plan_out_again(work, settled):
    cache = PlanCache()
    before = cache.plan(work, load_config(work))
    (work / "srv.py").write_text("print('x')\n")
    (work / "toolkernel.toml").write_text(
        f'[mcp_servers.local]\ncommand = {json.dumps(sys.executable)}\nargs = ["srv.py"]\nload = "on-demand"\n')
    TrustStore().trust(work)
    after = cache.plan(work, load_config(work))
    assert (work / "srv.py").resolve() in after.protected and after != before


def test_entries_changed_a_moment_ago_are_not_trusted_to_show_the_next_change(work):
    cache, config = PlanCache(), load_config(work)
    first = cache.plan(work, config)  # toolkernel.toml was written just now
    assert cache._kept is None
    assert cache.plan(work, config) is not first


def test_a_kernel_sees_a_hook_folder_swapped_between_two_runs(work, settled):
    session = Session(work)
    try:
        assert session.run_script("echo one > one.txt", CollectingSink()).exit_code == 0
        os.rename(work / "hooks", work / "elsewhere")
        (work / "hooks").symlink_to("elsewhere")
        # The hook's real folder is read-only in the next run: the script cannot rewrite it.
        result = session.run_script("echo x > elsewhere/guard.sh", CollectingSink())
        assert result.exit_code != 0
        assert "allow" in (work / "elsewhere" / "guard.sh").read_text()
    finally:
        session.close()


def test_a_mode_change_of_a_protected_file_is_seen(work, settled):
    cache, config = PlanCache(), load_config(work)
    cache.plan(work, config)
    kept = cache._kept
    (work / "hooks" / "guard.sh").chmod(stat.S_IRUSR)
    cache.plan(work, config)
    assert cache._kept is not kept
