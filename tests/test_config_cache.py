"""The config is re-read on every run whenever anything it comes from changed, and only then."""

from __future__ import annotations

import os
import time

import pytest

from kernel_helpers import isolated_env, policy_toml, write_config
from toolkernel._config._cache import ConfigCache, StatOnce, lstat_or_none
from toolkernel._errors import ConfigError


@pytest.fixture
def project(tmp_path, monkeypatch):
    for key, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    work = tmp_path / "work"
    work.mkdir()
    return work


def test_an_unchanged_config_is_not_read_again(project):
    write_config(project, policy_toml(deny=["aaaa"]))
    cache = ConfigCache(project)
    assert cache.load() is cache.load()


def test_a_same_size_rewrite_in_place_is_seen(project):
    path = write_config(project, policy_toml(deny=["aaaa"]))
    cache = ConfigCache(project)
    assert cache.load().policy["deny"] == ("aaaa",)
    with open(path, "r+") as f:  # same inode, same size, same second
        f.write(policy_toml(deny=["bbbb"]))
    assert cache.load().policy["deny"] == ("bbbb",)


def test_a_new_file_in_a_parent_folder_and_a_user_config_are_seen(project, tmp_path):
    cache = ConfigCache(project)
    assert cache.load().policy.get("deny", ()) == ()
    write_config(project.parent, policy_toml(deny=["parent"]))
    assert "parent" in cache.load().policy["deny"]
    user = tmp_path / "xdg" / "toolkernel"
    user.mkdir(parents=True)
    write_config(user, policy_toml(deny=["user"]))
    assert "user" in cache.load().policy["deny"]


def test_a_changed_environment_is_seen(project, monkeypatch, tmp_path):
    user = tmp_path / "xdg" / "toolkernel"
    user.mkdir(parents=True)
    write_config(user, '[mcp_servers.s]\ncommand = "x"\nargs = ["${TK_CACHE_TEST}"]\n')
    monkeypatch.setenv("TK_CACHE_TEST", "one")
    cache = ConfigCache(project)
    assert cache.load().servers["s"].args == ("one",)
    monkeypatch.setenv("TK_CACHE_TEST", "two")
    assert cache.load().servers["s"].args == ("two",)


def test_a_bad_config_fails_every_time_and_is_never_kept(project):
    path = write_config(project, "not toml [")
    cache = ConfigCache(project)
    for _ in range(2):
        with pytest.raises(Exception):
            cache.load()
    os.remove(path)
    assert cache.load().servers == {}


def test_one_runs_checks_look_at_a_path_once_and_not_into_a_missing_folder(tmp_path):
    looked_at = StatOnce()
    gone, real, link = tmp_path / "gone", tmp_path / "real", tmp_path / "link"
    real.mkdir()
    (real / "f").write_text("x")
    link.symlink_to(real)
    assert looked_at(str(gone)) is None
    gone.mkdir()
    (gone / "f").write_text("x")
    # As they were when the run's checks looked (the next run's checks see both).
    assert looked_at(str(gone)) is None and looked_at(str(gone / "f")) is None
    assert StatOnce()(str(gone / "f")) is not None
    # A folder reached through a link is looked into.
    assert looked_at(str(link)) is not None and looked_at(str(link / "f")) is not None


# --- sparing the looks for files missing in a folder that did not change ----------------

def settled(cache: ConfigCache) -> None:
    """Two checks more than 2 s after the last change: the second one saw every folder settled."""
    cache.load()
    time.sleep(2.2)
    cache.load()


def looks(cache: ConfigCache, lstat=lstat_or_none):
    """The config `cache` loads, and the paths its check looked at."""
    seen: list[str] = []
    config = cache.load(lambda path: seen.append(path) or lstat(path))
    return config, seen


@pytest.mark.slow
def test_files_missing_last_time_in_an_unchanged_settled_folder_are_not_looked_for(project):
    cache = ConfigCache(project)
    _, seen = looks(cache)
    assert str(project / "toolkernel.toml") in seen  # a folder just made: looked into
    settled(cache)
    _, seen = looks(cache)
    assert str(project) in seen and str(project / "toolkernel.toml") not in seen
    assert str(project / ".toolkernel" / "approvals.json") not in seen


@pytest.mark.slow
def test_a_new_config_file_in_a_settled_folder_is_seen(project):
    cache = ConfigCache(project)
    settled(cache)
    write_config(project.parent, policy_toml(deny=["parent"]))
    assert "parent" in cache.load().policy["deny"]
    # Made with the folder's times put back: its change time still moved.
    before = os.stat(project)
    settled(cache)
    (project / ".mcp.json").write_text('{"mcpServers": {"s": {"command": "x"}}}')
    os.utime(project, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert "s" in cache.load().servers


@pytest.mark.slow
def test_a_file_replaced_with_the_same_size_and_times_in_a_settled_folder_is_seen(project, tmp_path):
    path = write_config(project, policy_toml(deny=["aaaa"]))
    cache = ConfigCache(project)
    settled(cache)
    old, folder = os.stat(path), os.stat(project)
    other = tmp_path / "other.toml"
    other.write_text(policy_toml(deny=["bbbb"]))
    os.utime(other, ns=(old.st_atime_ns, old.st_mtime_ns))
    os.replace(other, path)
    os.utime(project, ns=(folder.st_atime_ns, folder.st_mtime_ns))
    assert cache.load().policy["deny"] == ("bbbb",)


@pytest.mark.slow
def test_a_file_made_in_a_folder_that_had_just_changed_is_looked_for(project):
    # A coarse clock may stamp a second change with the same times as the first: a folder
    # that changed within 2 s of the last check is looked into even when it looks unchanged.
    cache = ConfigCache(project)
    settled(cache)
    (project / "scratch").write_text("")  # the folder changes now
    as_then = os.lstat(project)
    cache.load()
    write_config(project, policy_toml(deny=["late"]))
    same_times = lambda path: as_then if path == str(project) else lstat_or_none(path)  # noqa: E731
    config, seen = looks(cache, same_times)
    assert str(project / "toolkernel.toml") in seen and config.policy["deny"] == ("late",)


@pytest.mark.slow
def test_a_linked_state_folder_is_looked_into(project, tmp_path):
    (tmp_path / "state").mkdir()
    (project / ".toolkernel").symlink_to(tmp_path / "state")
    cache = ConfigCache(project)
    settled(cache)
    _, seen = looks(cache)
    # A link's own times do not move when its target's entries do.
    assert str(project / ".toolkernel" / "approvals.json") in seen


# --- a folder's times alone do not read the config again ---------------------------------

@pytest.mark.slow
def test_an_entry_made_or_removed_in_a_project_folder_does_not_read_the_config_again(project):
    # A notebook's autosave, a saved output: a folder's times move, what can hold config does not.
    write_config(project, policy_toml(deny=["aaaa"]))
    (project / ".toolkernel").mkdir()
    cache = ConfigCache(project)
    first = cache.load()
    (project / "notes.txt").write_text("x")
    (project / ".toolkernel" / "output.txt").write_text("x")
    assert cache.load() is first
    os.remove(project / "notes.txt")
    assert cache.load() is first
    settled(cache)
    (project.parent / "other.txt").write_text("x")
    assert cache.load() is first


@pytest.mark.slow
def test_a_config_file_made_beside_other_entries_is_read(project):
    cache = ConfigCache(project)
    settled(cache)
    first = cache.load()
    (project / "notes.txt").write_text("x")
    assert cache.load() is first
    write_config(project, policy_toml(deny=["late"]))
    assert cache.load().policy["deny"] == ("late",)
    (project / ".toolkernel").mkdir()
    (project / ".toolkernel" / "approvals.json").write_text("[]")
    assert cache.load() is not first


@pytest.mark.slow
def test_a_folder_made_writable_by_anyone_is_seen(project):
    write_config(project, policy_toml(deny=["aaaa"]))
    cache = ConfigCache(project)
    first = cache.load()
    settled(cache)
    os.chmod(project, 0o777)
    try:
        config = cache.load()
        assert config is not first and any("anyone may write" in line for line in config.untrusted)
    finally:
        os.chmod(project, 0o755)


@pytest.mark.slow
def test_a_link_to_nothing_made_where_no_config_was_is_seen(project):
    # A path missing at the last check is asked about without following links.
    cache = ConfigCache(project)
    settled(cache)
    (project / "toolkernel.toml").symlink_to(project / "nowhere.toml")
    with pytest.raises(ConfigError, match="symlink to nothing"):
        cache.load()
