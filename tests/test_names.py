"""One rule for names: folding, qualified names and their inverse."""

from __future__ import annotations

import pytest

from toolkernel._names import QualifiedName, SERVER_NAME, display, fold, parse_qualified, qualified


@pytest.mark.parametrize("a, b", [
    ("list-pulls", "list_pulls"),
    ("GitHub", "github"),
    ("Straße", "STRASSE"),        # `.lower()` keeps `ß`; case folding makes it `ss`
    ("ＧｉｔＨｕｂ", "github"),     # full-width letters (NFKC)
    ("ﬁle", "FILE"),              # the `fi` ligature
    ("Ω", "ω"),
])
def test_names_that_fold_alike(a, b):
    assert fold(a) == fold(b)


@pytest.mark.parametrize("a, b", [("github", "gitlab"), ("a-b", "ab"), ("ı", "i")])
def test_names_that_stay_apart(a, b):
    assert fold(a) != fold(b)


def test_display_spells_the_command_form():
    assert display("list_pulls") == "list-pulls"


@pytest.mark.parametrize("kind, server, tool, name", [
    ("mcp", "github", "list_pulls", "mcp_github__list_pulls"),
    ("mcp", "my-docs", "search", "mcp_my-docs__search"),
    ("mcp", "gh_2", "_private", "mcp_gh_2___private"),
    ("mcp", "s", "a__b", "mcp_s__a__b"),
    ("command", None, "ripgrep", "tool__ripgrep"),
])
def test_qualified_names_read_back(kind, server, tool, name):
    assert qualified(kind, server, tool) == name
    assert parse_qualified(name) == QualifiedName(kind, server, tool)
    assert parse_qualified(fold(name)) == QualifiedName(kind, fold(server) if server else None, fold(tool))


@pytest.mark.parametrize("kind", ["builtin", "notebook"])
def test_top_level_tools_keep_their_bare_name(kind):
    assert qualified(kind, None, "read_file") == "read_file"
    assert parse_qualified("read_file") == QualifiedName(None, None, "read_file")


def test_other_spellings_of_qualified_names():
    assert parse_qualified("mcp__github__list_pulls") == QualifiedName("mcp", "github", "list_pulls")
    assert parse_qualified("mcp_github") == QualifiedName("mcp", "github", None)
    assert parse_qualified("mcp_") == QualifiedName(None, None, "mcp_")


def test_an_mcp_name_needs_its_server():
    with pytest.raises(ValueError):
        qualified("mcp", None, "x")


@pytest.mark.parametrize("name", ["github", "my-docs", "gh_2", "a-b_c", "X1"])
def test_server_names_allowed(name):
    assert SERVER_NAME.fullmatch(name)


@pytest.mark.parametrize("name", ["foo-", "foo_", "foo__x", "foo--x", "foo-_x", "-x", "_x", "a b", ""])
def test_server_names_that_would_blur_the_boundary_are_refused(name):
    assert not SERVER_NAME.fullmatch(name)
