"""Finding the config files, reading one, and `${VAR}` expansion."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from toolkernel._config._config import read_config
from toolkernel._config._expand import Expander
from toolkernel._config._sources import Source, sources
from toolkernel._config._trust import fingerprints
from toolkernel._errors import ConfigError


def test_expansion_takes_defaults_and_remembers_values_and_missing_names():
    expand = Expander({"TOKEN": "t0k", "EMPTY": ""})
    assert expand("a=${TOKEN} b=${EMPTY:-d} c=${NOPE:-x} d=${NOPE} e=${NOPE}") == "a=t0k b=d c=x d= e="
    assert expand.values == ["t0k"] and expand.missing == ["NOPE"]
    assert dict(expand.table({"k": "${TOKEN}"})) == {"k": "t0k"} and expand.each(["$x", "${TOKEN}"]) == ("$x", "t0k")


def test_files_come_lowest_precedence_first_and_the_walk_stops_at_home(tmp_path):
    home = tmp_path / "home"
    work = home / "proj" / "sub"
    work.mkdir(parents=True)
    found = sources(work, {"HOME": str(home), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
                           "TOOLKERNEL_ADMIN_CONFIG": str(tmp_path / "admin.toml")})
    assert [(s.path, s.admin, s.project) for s in found] == [
        (tmp_path / "admin.toml", True, False), (tmp_path / "xdg" / "toolkernel" / "toolkernel.toml", False, False),
        *[(folder / name, False, True) for folder in (home, home / "proj", work)
          for name in (".mcp.json", "toolkernel.toml")]]


def test_reading_a_file_that_is_not_there_and_one_that_leads_nowhere(tmp_path):
    assert Source(tmp_path / "toolkernel.toml").read() is None
    os.symlink(tmp_path / "gone", tmp_path / "toolkernel.toml")
    source = Source(tmp_path / "toolkernel.toml")
    assert source.attempt(source.read) is None
    (problem,) = source.problems
    assert "symlink to nothing" in str(problem) and problem.path == str(tmp_path / "toolkernel.toml")


def test_attempt_keeps_the_file_order_of_the_problems(tmp_path):
    source = Source(Path(tmp_path / "toolkernel.toml"))

    def check() -> None:
        source.problems.append(source.error("b", "noted on the way"))
        raise source.error("a", "the first")

    source.attempt(check)
    assert [p.key for p in source.problems] == ["a", "b"]


# A cloned repository chooses what its config files are. Read as they were, a link to
# /dev/zero was read until memory ran out, and a pipe nobody writes to held the first run.

def read_in_thread(read):
    """`read()` on a thread that may not be held for ever: what it returned or raised."""
    outcome = []

    def attempt():
        try:
            outcome.append(read())
        except BaseException as exc:  # noqa: BLE001 (the test looks at what it was)
            outcome.append(exc)

    reader = threading.Thread(target=attempt, daemon=True)
    reader.start()
    reader.join(timeout=60)
    assert outcome, "the config file was still being read after a minute"
    return outcome[0]


@pytest.mark.parametrize("name", ["toolkernel.toml", ".mcp.json"])
@pytest.mark.parametrize("make", [
    lambda path: os.symlink("/dev/zero", path),
    lambda path: os.mkfifo(path),
], ids=["link to /dev/zero", "fifo"])
def test_a_config_file_that_is_no_regular_file_is_an_error_naming_it(tmp_path, name, make):
    make(tmp_path / name)
    problem = read_in_thread(Source(tmp_path / name).read)
    assert isinstance(problem, ConfigError), problem
    assert problem.path == str(tmp_path / name) and "is not a regular file" in problem.problem


def test_a_config_file_larger_than_a_mib_is_an_error_naming_it(tmp_path):
    (tmp_path / "toolkernel.toml").write_text("# padding\n" * 200_000)  # valid TOML of 2 MB
    with pytest.raises(ConfigError, match=r"toolkernel.toml: is larger than 1 MiB"):
        Source(tmp_path / "toolkernel.toml").read()


@pytest.mark.parametrize("name, text, key", [
    ("toolkernel.toml", '[mcp_servers.x]\ncommand = "sh"\nargs = ["ok", "a\\u0000b"]\n', "mcp_servers.x.args[1]"),
    ("toolkernel.toml", '[mcp_servers.x]\ncommand = "sh"\nenv = { "K\\u0000" = "v" }\n', "mcp_servers.x.env.K\\u0000"),
    (".mcp.json", '{"mcpServers": {"x": {"command": "sh", "env": {"K": "a\\u0000"}}}}', "mcpServers.x.env.K"),
])
def test_a_config_value_holding_a_nul_is_an_error_naming_its_key(tmp_path, name, text, key):
    # No command, path or variable can carry one: the run's first look at the file on disk
    # failed inside toolkernel ("embedded null byte") instead.
    (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError, match="NUL") as raised:
        Source(tmp_path / name).read()
    assert raised.value.key == key


def test_a_link_to_a_config_file_is_still_read(tmp_path):
    (tmp_path / "shared.toml").write_text('[shell]\nmode = "ask"\n')
    os.symlink(tmp_path / "shared.toml", tmp_path / "toolkernel.toml")
    assert Source(tmp_path / "toolkernel.toml").read() == {"shell": {"mode": "ask"}}


def test_a_project_with_mcp_json_linked_to_dev_zero_is_reported_not_read(tmp_path, monkeypatch):
    # The trust check reads every config file of the folder too (its fingerprint).
    monkeypatch.delenv("TOOLKERNEL_TRUST_ALL", raising=False)
    work = tmp_path / "home" / "clone"
    work.mkdir(parents=True)
    (work / "toolkernel.toml").write_text("# nothing set\n")
    os.symlink("/dev/zero", work / ".mcp.json")
    environ = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
               "XDG_STATE_HOME": str(tmp_path / "state"), "TOOLKERNEL_ADMIN_CONFIG": str(tmp_path / "admin.toml")}
    assert fingerprints(work)[".mcp.json"] == "unreadable"  # never trusted
    _, problems = read_in_thread(lambda: read_config(work, environ=environ))
    assert [(p.path, "is not a regular file" in p.problem) for p in problems] == [(str(work / ".mcp.json"), True)]
