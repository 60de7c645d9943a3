"""Finding the config files, reading one, and `${VAR}` expansion."""

from __future__ import annotations

import os
from pathlib import Path

from toolkernel._config._expand import Expander
from toolkernel._config._sources import Source, sources


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
