import asyncio
import codecs
import itertools
import os
import shutil
from pathlib import Path

import pytest

from toolkernel._tool import ToolContext
from toolkernel._providers._tools.search import glob_search, grep_search

HAS_RG = shutil.which("rg") is not None
BUILTIN = {"engine": "builtin"}  # grep_search's own [tools.grep_search] table


def call(tool, args, workdir, settings=None):
    result = asyncio.run(tool.call(args, ToolContext(workdir=Path(workdir), settings=settings or {})))
    return "\n".join(result.texts), result.is_error


def grep(args, workdir, engine):
    settings = BUILTIN if engine == "builtin" else {}
    return call(grep_search, args, workdir, settings)


def write(root, rel, data):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data)
    else:
        path.write_bytes(data)
    return path


# ---- glob_search


def test_glob_globstar_braces_and_newest_first(tmp_path):
    for i, rel in enumerate(["a.ts", "src/b.tsx", "src/deep/c.ts", "src/d.js", "node_modules/x.ts",
                             ".git/y.ts", "dist/z.ts", "vendor/v.ts", "__pycache__/p.ts", ".next/n.ts"]):
        path = write(tmp_path, rel, "x")
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
    out, err = call(glob_search, {"pattern": "**/*.{ts,tsx}"}, tmp_path)
    assert not err
    assert out.splitlines() == ["src/deep/c.ts", "src/b.tsx", "a.ts"]


def test_glob_star_stays_in_one_folder_and_path_is_relative_to_workspace(tmp_path):
    write(tmp_path, "top.py", "")
    write(tmp_path, "pkg/mod.py", "")
    write(tmp_path, "pkg/sub/inner.py", "")
    assert call(glob_search, {"pattern": "*.py"}, tmp_path)[0] == "top.py"
    out, _ = call(glob_search, {"pattern": "*.py", "path": "pkg"}, tmp_path)
    assert out == "pkg/mod.py"
    out, _ = call(glob_search, {"pattern": "**/*.py", "path": "pkg"}, tmp_path)
    assert sorted(out.splitlines()) == ["pkg/mod.py", "pkg/sub/inner.py"]


def test_glob_caps_at_100_and_says_so(tmp_path):
    for i in range(130):
        os.utime(write(tmp_path, f"f{i:03}.txt", ""), (2_000_000 + i, 2_000_000 + i))
    lines = call(glob_search, {"pattern": "*.txt"}, tmp_path)[0].splitlines()
    assert len(lines) == 101
    assert lines[0] == "f129.txt" and lines[99] == "f030.txt"
    assert "130 files match" in lines[100]


def test_glob_no_match_and_bad_patterns(tmp_path):
    assert call(glob_search, {"pattern": "*.nothing"}, tmp_path) == ("No files found matching *.nothing", False)
    assert call(glob_search, {"pattern": "../*"}, tmp_path)[1]
    assert call(glob_search, {"pattern": "/etc/*"}, tmp_path)[1]
    assert call(glob_search, {"pattern": "{a,b"}, tmp_path)[1]
    write(tmp_path, "f", "")
    assert call(glob_search, {"pattern": "*", "path": "f"}, tmp_path)[1]


# ---- grep_search: a tree with the awkward cases, searched by both engines


@pytest.fixture()
def tree(tmp_path):
    write(tmp_path, "README.md", "# Title\nfoo in readme\n")
    write(tmp_path, "a.py", "import os\n\ndef foo():\n    return 1\n\n\ndef bar():\n    foo()\n")
    write(tmp_path, "a.txt", "Foo upper\nfoo lower\nplain\n")
    write(tmp_path, "a/b.py", "foo = 1\n")
    write(tmp_path, "a-b/c.py", "x = foo\n")
    write(tmp_path, "src/app.ts", "const foo = 1;\nexport { foo };\n")
    write(tmp_path, "src/deep/more.tsx", "let x = <Foo/>;\n")
    write(tmp_path, ".hidden/h.py", "foo hidden\n")
    write(tmp_path, "node_modules/m/index.js", "foo in node_modules\n")
    write(tmp_path, ".git/config", "foo in git\n")
    write(tmp_path, "dist/out.js", "foo in dist\n")
    write(tmp_path, "bin.dat", b"foo\x00binary\n")
    write(tmp_path, "crlf.txt", b"foo one\r\nbar\r\nfoo two\r\n")
    write(tmp_path, "bom.txt", codecs.BOM_UTF8 + b"foo with bom\n")
    write(tmp_path, "u16.txt", codecs.BOM_UTF16_LE + "foo in utf16\nbar\n".encode("utf-16-le"))
    write(tmp_path, "bad.txt", b"caf\xe9 foo\n")
    write(tmp_path, "long.txt", "foo" + "x" * 900 + "\n")
    write(tmp_path, "noeol.txt", "first\nlast foo")
    write(tmp_path, "multi.txt", "class A:\n    \"\"\"Doc.\"\"\"\n\nclass B:\n    pass\nfoo\nfoo\nfoo\n")
    return tmp_path


QUERIES = [
    {"pattern": "foo"},
    {"pattern": "foo", "output_mode": "content"},
    {"pattern": "foo", "output_mode": "count"},
    {"pattern": "foo", "output_mode": "content", "i": True},
    {"pattern": "foo", "output_mode": "content", "C": 1},
    {"pattern": "foo", "output_mode": "content", "A": 2, "n": False},
    {"pattern": "foo", "output_mode": "content", "B": 1, "context": 3},
    {"pattern": "^$", "output_mode": "content"},
    {"pattern": "o$", "output_mode": "count"},
    {"pattern": r"\bfoo\b", "glob": "*.py"},
    {"pattern": "foo", "glob": "*.{ts,tsx}", "i": True},
    {"pattern": "foo", "glob": "src/*.ts"},
    {"pattern": "foo", "glob": "!*.txt"},
    {"pattern": "foo", "type": "py", "output_mode": "content"},
    {"pattern": "foo", "type": "ts", "i": True},
    {"pattern": "foo", "type": "py", "glob": "*.md"},
    {"pattern": "foo", "path": "a"},
    {"pattern": "foo", "path": "a.py", "output_mode": "content"},
    {"pattern": "foo", "path": "bin.dat"},
    {"pattern": "foo", "path": "src", "output_mode": "count"},
    {"pattern": r"class \w+:\n\s+\S", "multiline": True, "output_mode": "content"},
    {"pattern": r"foo\nfoo", "multiline": True, "output_mode": "count"},
    {"pattern": r"A:.*B:", "multiline": True, "output_mode": "content", "C": 1},
    {"pattern": "foo", "output_mode": "content", "head_limit": 3, "offset": 2},
    {"pattern": "foo", "head_limit": 2},
    {"pattern": "foo", "offset": 100},
    {"pattern": "nothing-matches-this"},
    {"pattern": "foo(", "output_mode": "content"},
    {"pattern": r"a\nb"},
]


@pytest.mark.skipif(not HAS_RG, reason="rg not installed")
@pytest.mark.parametrize("query", QUERIES, ids=[str(i) for i in range(len(QUERIES))])
def test_rg_and_builtin_give_the_same_results(tree, query):
    from_rg, rg_error = grep(query, tree, "rg")
    from_builtin, builtin_error = grep(query, tree, "builtin")
    assert rg_error == builtin_error
    if not rg_error:
        assert from_rg == from_builtin


@pytest.mark.parametrize("engine", ["rg", "builtin"] if HAS_RG else ["builtin"])
class TestFormats:
    def test_files_with_matches_sorted_skipping_binary_and_skipped_dirs(self, tree, engine):
        out, err = grep({"pattern": "foo"}, tree, engine)
        assert not err
        assert out.splitlines() == [
            ".hidden/h.py", "README.md", "a/b.py", "a-b/c.py", "a.py", "a.txt", "bad.txt", "bom.txt",
            "crlf.txt", "long.txt", "multi.txt", "noeol.txt", "src/app.ts", "u16.txt",
        ]

    def test_content_with_line_numbers(self, tree, engine):
        out, _ = grep({"pattern": "foo", "output_mode": "content", "path": "a.py"}, tree, engine)
        assert out == "a.py:3:def foo():\na.py:8:    foo()"
        out, _ = grep({"pattern": "foo", "output_mode": "content", "path": "crlf.txt", "n": False}, tree, engine)
        assert out == "crlf.txt:foo one\ncrlf.txt:foo two"
        out, _ = grep({"pattern": "with", "output_mode": "content"}, tree, engine)
        assert out == "bom.txt:1:foo with bom"

    def test_context_lines_and_separators(self, tree, engine):
        out, _ = grep({"pattern": "foo|bar", "output_mode": "content", "path": "a.py", "B": 1}, tree, engine)
        assert out.splitlines() == ["a.py-2-", "a.py:3:def foo():", "--", "a.py-6-", "a.py:7:def bar():",
                                    "a.py:8:    foo()"]
        out, _ = grep({"pattern": "upper|hidden", "output_mode": "content", "C": 1}, tree, engine)
        assert out.splitlines() == [".hidden/h.py:1:foo hidden", "--", "a.txt:1:Foo upper", "a.txt-2-foo lower"]

    def test_count_and_paging(self, tree, engine):
        out, _ = grep({"pattern": "foo", "output_mode": "count", "path": "multi.txt"}, tree, engine)
        assert out == "multi.txt:3"
        out, _ = grep({"pattern": "foo", "head_limit": 3, "offset": 1}, tree, engine)
        assert out.splitlines() == ["README.md", "a/b.py", "a-b/c.py", "(showing 2-4 of 14; use offset=4 for more)"]

    def test_long_lines_are_cut(self, tree, engine):
        out, _ = grep({"pattern": "foo", "output_mode": "content", "path": "long.txt"}, tree, engine)
        assert out == "long.txt:1:foo" + "x" * 497 + " [... 403 more characters]"

    def test_type_and_glob_filters(self, tree, engine):
        assert grep({"pattern": "foo", "type": "py"}, tree, engine)[0].splitlines() == [
            ".hidden/h.py", "a/b.py", "a-b/c.py", "a.py"]
        assert grep({"pattern": "foo", "glob": "*.{ts,tsx}", "i": True}, tree, engine)[0].splitlines() == [
            "src/app.ts", "src/deep/more.tsx"]
        unknown = grep({"pattern": "foo", "type": "cobol"}, tree, engine)
        assert unknown[1] and "unknown file type" in unknown[0]

    def test_errors(self, tree, engine):
        assert grep({"pattern": "foo("}, tree, engine)[1]
        newline = grep({"pattern": r"a\nb"}, tree, engine)
        assert newline[1] and "multiline" in newline[0]
        assert grep({"pattern": "x", "path": "missing"}, tree, engine)[1]
        assert grep({"pattern": "nothing-here"}, tree, engine) == ("No matches found", False)

    @pytest.mark.parametrize("args", [{"pattern": "fo\0o"}, {"pattern": "foo", "glob": "*.py\0"}])
    def test_a_nul_in_the_pattern_or_glob_is_said_as_bad_input(self, tree, engine, args):
        out, is_error = grep(args, tree, engine)
        assert is_error and "NUL character" in out and "embedded null byte" not in out


def test_builtin_engine_runs_when_rg_is_not_on_path(tree, monkeypatch):
    monkeypatch.setenv("PATH", str(tree / "no-such-bin"))
    out, err = call(grep_search, {"pattern": "foo", "output_mode": "count", "path": "a.txt", "i": True}, tree)
    assert (out, err) == ("a.txt:2", False)


@pytest.mark.skipif(not HAS_RG, reason="rg not installed")
def test_engines_agree_on_a_generated_tree(tmp_path):
    words = ["alpha", "beta", "gamma", "delta", "Alpha", "", "  indent", "tab\there"]
    for i in range(60):
        lines = [words[(i * 7 + j * 3) % len(words)] + f" {j}" * (j % 3) for j in range(i % 17)]
        write(tmp_path, f"d{i % 4}/sub{i % 3}/f{i}.{['py', 'txt', 'md'][i % 3]}", "\n".join(lines) + ("\n" if i % 2 else ""))
    patterns = ["alpha", "^beta", r"\d$", "a.*a", r"\t"]
    options = [{}, {"output_mode": "content", "C": 2}, {"output_mode": "count", "i": True},
               {"output_mode": "content", "glob": "*.py", "n": False}, {"type": "md", "output_mode": "content", "A": 1}]
    for pattern, extra in itertools.product(patterns, options):
        query = {"pattern": pattern, "head_limit": 0, **extra}
        assert grep(query, tmp_path, "rg") == grep(query, tmp_path, "builtin"), query


# ---- a cancelled run stops a search still walking


def test_glob_and_the_builtin_grep_stop_when_the_run_is_cancelled(tmp_path):
    from toolkernel._providers._tools.search import build_query, search_builtin

    for i in range(30):
        write(tmp_path, f"d{i}/f.txt", "needle\n")
    asked = []

    def cancelled_at_the_third_look() -> bool:
        asked.append(True)
        return len(asked) >= 3

    ctx = ToolContext(workdir=tmp_path, cancelled=cancelled_at_the_third_look)
    with pytest.raises(asyncio.CancelledError):
        glob_search.call_now({"pattern": "**/*.txt"}, ctx)
    assert len(asked) == 3  # it stopped there, not at the end of the walk

    asked.clear()
    query = build_query({"pattern": "needle"}, ctx)
    with pytest.raises(asyncio.CancelledError):
        search_builtin(query, ctx.check_cancelled)
    assert len(asked) == 3


# ---- toolkernel's own state and cache folders (issue 49)


def _home_workspace(tmp_path, monkeypatch, xdg: bool):
    """A workspace that is the home folder, with toolkernel's state (the journal's copies of the
    workspace's files among it) and cache inside: at the defaults, or where XDG_* put them."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    for variable in ("XDG_STATE_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    state, cache = home / ".local/state/toolkernel", home / ".cache/toolkernel"
    if xdg:
        state, cache = home / "my state/toolkernel", home / "c[1]/toolkernel"
        monkeypatch.setenv("XDG_STATE_HOME", str(state.parent))
        monkeypatch.setenv("XDG_CACHE_HOME", str(cache.parent))
    write(home, "notes.txt", "needle\n")
    write(state, "journal/p/contents/ab/notes.txt", "needle\n")
    write(cache, "labextension/x/notes.txt", "needle\n")
    write(home, ".local/share/other/notes.txt", "needle\n")  # not toolkernel's: searched
    return home


@pytest.mark.parametrize("xdg", [False, True], ids=["defaults", "xdg"])
@pytest.mark.parametrize("engine", ["rg", "builtin"])
def test_grep_and_glob_skip_toolkernels_state_and_cache(tmp_path, monkeypatch, engine, xdg):
    if engine == "rg" and not HAS_RG:
        pytest.skip("rg is not installed")
    home = _home_workspace(tmp_path, monkeypatch, xdg)
    out, err = grep({"pattern": "needle"}, home, engine)
    assert not err and sorted(out.splitlines()) == [".local/share/other/notes.txt", "notes.txt"]
    out, err = grep({"pattern": "needle", "glob": "**/notes.txt"}, home, engine)  # no glob re-admits them
    assert sorted(out.splitlines()) == [".local/share/other/notes.txt", "notes.txt"]
    out, err = call(glob_search, {"pattern": "**/notes.txt"}, home)
    assert not err and sorted(out.splitlines()) == [".local/share/other/notes.txt", "notes.txt"]


def test_the_state_folder_at_its_default_is_skipped_while_xdg_points_elsewhere(tmp_path, monkeypatch):
    # A kernel started with XDG_STATE_HOME set and a serve started without it share one home.
    home = _home_workspace(tmp_path, monkeypatch, xdg=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "elsewhere"))
    (tmp_path / "elsewhere/toolkernel").mkdir(parents=True)
    out, _ = call(glob_search, {"pattern": "**/notes.txt"}, home)
    assert sorted(out.splitlines()) == [".local/share/other/notes.txt", "notes.txt"]


def test_a_search_inside_the_state_folder_by_name_searches_it(tmp_path, monkeypatch):
    home = _home_workspace(tmp_path, monkeypatch, xdg=False)
    out, err = call(glob_search, {"pattern": "**/notes.txt", "path": ".local/state/toolkernel"}, home)
    assert not err and out == ".local/state/toolkernel/journal/p/contents/ab/notes.txt"


def test_the_tools_help_says_what_is_skipped():
    for tool in (grep_search, glob_search):
        assert ".git" in tool.description and "toolkernel's own state and cache folders" in tool.description
