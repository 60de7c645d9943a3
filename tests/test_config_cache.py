"""The config is re-read on every run whenever anything it comes from changed, and only then."""

from __future__ import annotations

import os

import pytest

from kernel_helpers import isolated_env, policy_toml, write_config
from toolkernel._config._cache import ConfigCache, StatOnce


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
