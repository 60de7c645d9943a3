"""glob_search and grep_search.

grep_search runs `rg` when it is installed and a built-in Python search
otherwise. Both engines produce the same records (file, line number, match or
context, text) under the same rules, and one formatter turns records into
text, so the output does not depend on which engine ran:

  * files, not folders, named `.git`, `node_modules`, `vendor`, `__pycache__`,
    `.next`, `dist` are skipped along with everything under them, and so are toolkernel's
    own state and cache folders where they lie below the search (`_config/_places.py`: with
    the workspace in `~`, the journal's copies of its files would be found beside them);
    hidden files are searched; `.gitignore` files are NOT consulted (rg gets `--no-ignore`);
  * a file containing a NUL byte is binary and skipped (rg stops at the first
    NUL it sees, so a file over 64 KB with a late NUL may differ);
  * UTF-8 and UTF-16 byte-order marks are honoured, other bytes are read as
    UTF-8 with invalid sequences replaced;
  * files are listed in path order (folder by folder, like `rg --sort path`).
"""

from __future__ import annotations

import asyncio
import bisect
import codecs
import contextlib
import os
import re
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ..._checked_open import PathChanged, open_checked, read_checked
from ..._config._places import own_folders_below
from ..._process import run_capped
from ..._tool import ToolContext, ToolInputError, tool
from ._glob import FilterGlob, GlobError, compile_path_glob, name_matcher
from ._paths import display_path

SKIPPED_DIRS = (".git", "node_modules", "vendor", "__pycache__", ".next", "dist")
GLOB_LIMIT = 100
DEFAULT_HEAD_LIMIT = 250
MAX_SHOWN_LINE = 500  # characters of one content line; minified files would flood the cell
# rg's output is parsed whole: past this the search fails instead of filling the memory.
_RG_OUTPUT_CAP = 256 * 1024 * 1024
_RG_ERROR_CAP = 1024 * 1024

# The definitions are ours (passed to rg with --type-add) so both engines agree.
FILE_TYPES: dict[str, tuple[str, ...]] = {
    "c": ("*.[chH]", "*.[chH].in", "*.cats"),
    "cpp": ("*.[ChH]", "*.[ChH].in", "*.[ch]pp", "*.[ch]pp.in", "*.[ch]xx", "*.[ch]xx.in", "*.cc", "*.cc.in", "*.hh", "*.hh.in", "*.inl"),
    "cs": ("*.cs",),
    "css": ("*.css", "*.scss"),
    "csv": ("*.csv",),
    "docker": ("*Dockerfile*",),
    "go": ("*.go",),
    "h": ("*.h", "*.hpp"),
    "html": ("*.ejs", "*.htm", "*.html"),
    "java": ("*.java", "*.jsp", "*.jspx", "*.properties"),
    "js": ("*.js", "*.jsx", "*.vue", "*.mjs", "*.cjs"),
    "json": ("*.json", "composer.lock"),
    "jsonl": ("*.jsonl",),
    "jupyter": ("*.ipynb",),
    "kotlin": ("*.kt", "*.kts"),
    "lua": ("*.lua",),
    "make": ("*.mak", "*.mk", "[Gg][Nn][Uu]makefile", "[Mm]akefile", "[Mm]akefile.am", "[Mm]akefile.in"),
    "md": ("*.markdown", "*.md", "*.mdown", "*.mkdn"),
    "markdown": ("*.markdown", "*.md", "*.mdown", "*.mkdn"),
    "php": ("*.php", "*.php3", "*.php4", "*.php5", "*.phtml"),
    "py": ("*.py", "*.pyi"),
    "r": ("*.R", "*.Rmd", "*.Rnw", "*.r"),
    "rst": ("*.rst",),
    "ruby": ("*.gemspec", "*.rb", "*.rbw", "Gemfile", "Rakefile", "config.ru"),
    "rust": ("*.rs",),
    "scala": ("*.sbt", "*.scala"),
    "sh": ("*.bash", "*.sh", "*.zsh", "*.ksh", "*.csh", ".bashrc", ".zshrc", ".profile"),
    "sql": ("*.psql", "*.sql"),
    "swift": ("*.swift",),
    "tex": ("*.bib", "*.cls", "*.sty", "*.tex"),
    "toml": ("*.toml", "Cargo.lock"),
    "ts": ("*.ts", "*.tsx", "*.mts", "*.cts"),
    "txt": ("*.txt",),
    "xml": ("*.xml", "*.xsd", "*.xsl", "*.xslt", "*.xhtml", "*.dtd"),
    "yaml": ("*.yaml", "*.yml"),
}


# ---------------------------------------------------------------- glob_search


@tool(
    "glob_search",
    description=(
        "Find files by name pattern. `**` matches across folders and `{a,b}` matches "
        "alternatives, as in `**/*.{ts,tsx}`. Returns up to 100 paths, most recently "
        "modified first. .git, node_modules, vendor, __pycache__, .next and dist are skipped, "
        "and so are toolkernel's own state and cache folders (~/.local/state/toolkernel, "
        "~/.cache/toolkernel, or where $XDG_STATE_HOME and $XDG_CACHE_HOME put them)."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "pattern": {
                "type": "string",
                "minLength": 1,
                "description": "Glob pattern relative to `path`, e.g. `**/*.py` or `src/*.{ts,tsx}`.",
            },
            "path": {
                "type": "string",
                "description": "Folder to search. Default: the working directory.",
            },
        },
        "required": ["pattern"],
        "additionalProperties": False,
    },
    kind="read",
    path_keys=("path",),
)
def glob_search(arguments: dict[str, Any], ctx: ToolContext) -> str:
    root = _root(arguments, ctx)
    pattern = arguments["pattern"]
    regex = _compile_search_glob(pattern)
    max_depth = None if "**" in pattern else pattern.count("/") + 1
    skipped = frozenset(own_folders_below(root))
    with _open_folder(root, ctx.workdir) as root_fd:
        found = [(mtime, rel) for rel, mtime in _walk_files(root_fd, max_depth, ctx.check_cancelled, skipped)
                 if regex.match(rel)]
    if not found:
        return f"No files found matching {pattern}"
    found.sort(key=lambda item: (-item[0], item[1]))
    shown = [display_path(root / rel, ctx.workdir) for _, rel in found[:GLOB_LIMIT]]
    if len(found) > GLOB_LIMIT:
        shown.append(f"({len(found)} files match; showing the {GLOB_LIMIT} most recently modified. Narrow the pattern or path.)")
    return "\n".join(shown)


def _compile_search_glob(pattern: str) -> re.Pattern[str]:
    parts = pattern.split("/")
    if pattern.startswith("/") or ".." in parts:
        raise ToolInputError("pattern is matched below `path`: give the folder as path= and a relative pattern")
    try:
        return compile_path_glob(pattern.removeprefix("./"))
    except GlobError as exc:
        raise ToolInputError(str(exc)) from exc


@contextlib.contextmanager
def _open_folder(folder: Path, workdir: Path) -> Iterator[int]:
    """`folder` (a checked real path) opened as checked, for a walk that starts from it."""
    shown = display_path(folder, workdir)
    try:
        fd = _open_search_root(folder, shown)
    except OSError:
        raise ToolInputError(f"{shown} is not a folder") from None
    try:
        yield fd
    finally:
        os.close(fd)


def _open_search_root(folder: Path, shown: str) -> int:
    """`folder` opened as checked; a swap since the checks is told in words, any other failure raised."""
    try:
        return open_checked(str(folder), os.O_RDONLY | os.O_DIRECTORY)
    except PathChanged:
        raise ToolInputError(f"{shown} changed before the search started (a folder on the way "
                             "was replaced); nothing was searched") from None


def _walk_files(root_fd: int, max_depth: int | None, check_cancelled: Callable[[], None],
                skipped: frozenset[str] = frozenset()) -> Iterator[tuple[str, float]]:
    """(path relative to the root, mtime) of every file below the open folder `root_fd`,
    skipped folders pruned (by name, and `skipped` by their path relative to the root).
    `os.fwalk` goes from open folder to open folder and never follows a link to one: a
    folder swapped for a link during the walk is not listed."""
    for folder, subfolders, names, fd in os.fwalk(".", dir_fd=root_fd):
        check_cancelled()
        rel_dir = folder[2:]  # "./a/b" -> "a/b"
        depth = rel_dir.count("/") + 2 if rel_dir else 1
        if max_depth is not None and depth >= max_depth:
            subfolders.clear()
        else:
            subfolders[:] = [name for name in subfolders if name not in SKIPPED_DIRS
                             and not (skipped and (f"{rel_dir}/{name}" if rel_dir else name) in skipped)]
        for count, name in enumerate(names, start=1):
            if not count % 512:  # a folder of a million files
                check_cancelled()
            try:
                status = os.stat(name, dir_fd=fd)  # a link to a file counts as that file, as before
            except OSError:
                continue
            if stat.S_ISREG(status.st_mode):
                yield (f"{rel_dir}/{name}" if rel_dir else name), status.st_mtime


# ---------------------------------------------------------------- grep_search


@dataclass(frozen=True)
class GrepQuery:
    pattern: str
    root: Path
    root_shown: str
    mode: str
    before: int
    after: int
    line_numbers: bool
    ignore_case: bool
    multiline: bool
    head_limit: int
    offset: int
    globs: tuple[FilterGlob, ...]
    type_globs: tuple[str, ...]

    @property
    def context(self) -> bool:
        return self.mode == "content" and (self.before > 0 or self.after > 0)


@dataclass
class FileHits:
    """What one file gave: matching lines (and context) or a count."""

    rel: str  # relative to the search root; "" when the root is the file
    count: int = 0
    lines: list[tuple[int, bool, str]] = field(default_factory=list)  # (number, is_match, text)


_GREP_PROPERTIES: dict[str, Any] = {
    "pattern": {"type": "string", "minLength": 1, "description": "Regular expression to search for (ripgrep / Python syntax)."},
    "path": {"type": "string", "description": "File or folder to search. Default: the working directory."},
    "glob": {"type": "string", "description": "Only search files matching this glob, e.g. `*.py` or `*.{ts,tsx}`; a leading `!` excludes."},
    "type": {"type": "string", "enum": sorted(FILE_TYPES), "description": "Only search files of this type, e.g. `py`, `js`, `go`."},
    "output_mode": {
        "type": "string",
        "enum": ["files_with_matches", "content", "count"],
        "default": "files_with_matches",
        "description": "files_with_matches: one path per line (default); content: matching lines as path:line:text; count: path:N matching lines.",
    },
    "A": {"type": "integer", "minimum": 0, "description": "Lines of context after each match (content mode)."},
    "B": {"type": "integer", "minimum": 0, "description": "Lines of context before each match (content mode)."},
    "C": {"type": "integer", "minimum": 0, "description": "Lines of context before and after each match (content mode)."},
    "context": {"type": "integer", "minimum": 0, "description": "Same as C."},
    "n": {"type": "boolean", "default": True, "description": "Show line numbers in content mode. Default true."},
    "i": {"type": "boolean", "default": False, "description": "Case-insensitive search."},
    "multiline": {"type": "boolean", "default": False, "description": "Let the pattern span lines; `.` then matches newlines too."},
    "head_limit": {
        "type": "integer",
        "minimum": 0,
        "default": DEFAULT_HEAD_LIMIT,
        "description": f"Return at most this many output lines / entries (0 = no limit). Default {DEFAULT_HEAD_LIMIT}.",
    },
    "offset": {"type": "integer", "minimum": 0, "default": 0, "description": "Skip this many output lines / entries first, for paging."},
}


@tool(
    "grep_search",
    description=(
        "Search file contents with a regular expression (ripgrep when installed, a built-in "
        "search otherwise, same results). Output like rg: paths, path:line:text, or path:N. "
        ".git, node_modules, vendor, __pycache__, .next and dist are skipped, and so are "
        "toolkernel's own state and cache folders (~/.local/state/toolkernel, ~/.cache/toolkernel, "
        "or where $XDG_STATE_HOME and $XDG_CACHE_HOME put them)."
    ),
    input_schema={
        "type": "object",
        "properties": _GREP_PROPERTIES,
        "required": ["pattern"],
        "additionalProperties": False,
    },
    kind="read",
    path_keys=("path",),
)
async def grep_search(arguments: dict[str, Any], ctx: ToolContext) -> str:
    query = build_query(arguments, ctx)
    if ctx.settings.get("engine") == "builtin" or rg_path() is None:
        hits = await asyncio.to_thread(search_builtin, query, ctx.check_cancelled)
    else:
        hits = await search_rg(query, rg_path())
    return format_hits(query, hits)


def rg_path() -> str | None:
    return shutil.which("rg")


def _root(arguments: dict[str, Any], ctx: ToolContext) -> Path:
    """The folder to search: the `path` argument where it leads, or the workspace."""
    return ctx.real(arguments, "path") if arguments.get("path") else ctx.workdir


def build_query(arguments: dict[str, Any], ctx: ToolContext) -> GrepQuery:
    root = _root(arguments, ctx)
    if not root.exists():
        raise ToolInputError(f"Path not found: {display_path(root, ctx.workdir)}")
    around = _int_arg(arguments, "C", _int_arg(arguments, "context", 0))
    mode = arguments.get("output_mode", "files_with_matches")
    multiline = bool(arguments.get("multiline", False))
    if not multiline and _NEWLINE_IN_PATTERN.search(arguments["pattern"]):
        # rg refuses this too (line by line a newline never matches); one message for both engines
        raise ToolInputError("grep_search: the pattern contains a newline (\\n); set multiline=true to match across lines")
    for key in ("pattern", "glob"):
        if "\0" in (arguments.get(key) or ""):
            # A program's argument cannot hold one (rg is handed both); one message for both engines
            raise ToolInputError(f"grep_search: the {key} contains a NUL character (\\0), which"
                                 " cannot be handed to ripgrep as an argument")
    if mode not in ("files_with_matches", "content", "count"):
        raise ToolInputError(f"output_mode must be files_with_matches, content or count, not {mode!r}")
    return GrepQuery(
        pattern=arguments["pattern"],
        root=root,
        root_shown=display_path(root, ctx.workdir),
        mode=mode,
        before=_int_arg(arguments, "B", around),
        after=_int_arg(arguments, "A", around),
        line_numbers=bool(arguments.get("n", True)),
        ignore_case=bool(arguments.get("i", False)),
        multiline=multiline,
        head_limit=_int_arg(arguments, "head_limit", DEFAULT_HEAD_LIMIT),
        offset=_int_arg(arguments, "offset", 0),
        globs=_filter_globs(arguments.get("glob"), own_folders_below(root)),
        type_globs=_type_globs(arguments.get("type")),
    )


def _int_arg(arguments: dict[str, Any], key: str, default: int) -> int:
    value = arguments.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ToolInputError(f"{key} must be a whole number >= 0, not {value!r}")
    return value


def _filter_globs(glob: str | None, skipped: tuple[str, ...] = ()) -> tuple[FilterGlob, ...]:
    """The user's glob, then the skip list: folders by name, and `skipped` (paths relative to the
    search root) anchored there, as `!/PATH/`."""
    # The skip list comes last: a later glob wins, so no user glob re-admits .git.
    sources = ([glob] if glob else []) + [f"!{name}" for name in SKIPPED_DIRS]
    sources += [f"!/{_glob_escaped(rel)}/" for rel in skipped]
    try:
        return tuple(FilterGlob.parse(source) for source in sources)
    except GlobError as exc:
        raise ToolInputError(str(exc)) from exc


def _glob_escaped(path: str) -> str:
    """`path` as a glob that matches only itself (rg's globs and ours take `\\` escapes)."""
    return re.sub(r"([\\*?\[\]{}!,])", r"\\\1", path)


def _type_globs(name: str | None) -> tuple[str, ...]:
    if not name:
        return ()
    if name not in FILE_TYPES:
        raise ToolInputError(f"unknown file type {name!r}; known: {', '.join(sorted(FILE_TYPES))}")
    return FILE_TYPES[name]


# ---- the rg engine


async def search_rg(query: GrepQuery, rg: str) -> list[FileHits]:
    if query.root.is_file() and _is_binary_file(query.root):
        return []
    cwd, target = _start_folder(query)
    with _pinned_folder(cwd, query.root_shown) as pinned:
        done = await run_capped([rg, *rg_arguments(query), "--", target], cwd=pinned,
                                stdout_cap=_RG_OUTPUT_CAP, stderr_cap=_RG_ERROR_CAP)
    if done.over_cap:
        raise ToolInputError(f"grep_search: rg wrote more than {_RG_OUTPUT_CAP // 2**20} MiB of "
                             "matches; narrow the pattern, the path or the glob")
    # exit 1 is "no match"; 2 is an error, which may still come with results
    if done.returncode == 2 and not done.stdout:
        raise ToolInputError(f"grep_search: {_rg_error(done.stderr)}")
    hits = _parse_rg(done.stdout, query)
    if query.root.is_file():
        for hit in hits:
            hit.rel = ""
    return hits


def _start_folder(query: GrepQuery) -> tuple[Path, str]:
    """The folder a search starts in, and what it searches there."""
    if query.root.is_file():
        return query.root.parent, query.root.name
    return query.root, "."


@contextlib.contextmanager
def _pinned_folder(folder: Path, shown: str) -> Iterator[str]:
    """A name for `folder` (a checked real path) that rg's start in it cannot be led away from:
    the folder is opened as checked (`open_checked`), and rg starts in that open folder, named
    through this process's /proc entry. Where that cannot be done, the folder's own name."""
    try:
        fd = _open_search_root(folder, shown)
    except OSError:
        yield str(folder)  # unreadable: rg says so, as it did
        return
    try:
        pinned = f"/proc/{os.getpid()}/fd/{fd}"
        yield pinned if os.path.isdir(pinned) else str(folder)
    finally:
        os.close(fd)


def rg_arguments(query: GrepQuery) -> list[str]:
    args = ["--no-config", "--no-ignore", "--hidden", "--color=never", "--no-heading",
            "--with-filename", "--null", "--line-number"]
    if query.ignore_case:
        args.append("--ignore-case")
    if query.multiline:
        args += ["--multiline", "--multiline-dotall"]
    if query.mode == "files_with_matches":
        args.append("--files-with-matches")
    elif query.mode == "count":
        args.append("--count")
    else:
        args += ["--after-context", str(query.after), "--before-context", str(query.before)]
    for glob in query.globs:
        args += ["--glob", glob.source]
    if query.type_globs:
        args += [f"--type-add=tksel:{glob}" for glob in query.type_globs] + ["--type=tksel"]
    args += ["--regexp", query.pattern]
    return args


def _parse_rg(out: bytes, query: GrepQuery) -> list[FileHits]:
    if query.mode == "files_with_matches":
        return [FileHits(_rel_from_rg(raw)) for raw in out.split(b"\0") if raw]
    by_file: dict[bytes, FileHits] = {}
    for line in out.split(b"\n"):
        raw_path, sep, rest = line.partition(b"\0")
        if not sep:
            continue  # "--" between context groups, or the final empty line
        hit = by_file.get(raw_path)
        if hit is None:
            hit = by_file[raw_path] = FileHits(_rel_from_rg(raw_path))
        if query.mode == "count":
            hit.count = int(rest)
        else:
            _add_rg_line(hit, rest)
    return list(by_file.values())


def _add_rg_line(hit: FileHits, rest: bytes) -> None:
    number_end = 0
    while rest[number_end : number_end + 1].isdigit():
        number_end += 1
    is_match = rest[number_end : number_end + 1] == b":"
    text = rest[number_end + 1 :].decode("utf-8", errors="replace")
    hit.lines.append((int(rest[:number_end]), is_match, text))
    hit.count += is_match


def _rel_from_rg(raw: bytes) -> str:
    return os.fsdecode(raw).removeprefix("./")


def _rg_error(err: bytes) -> str:
    text = err.decode("utf-8", errors="replace").strip()
    return "\n".join(text.splitlines()[:12]) or "rg failed"


# ---- the built-in engine


def search_builtin(query: GrepQuery, check_cancelled: Callable[[], None] = lambda: None) -> list[FileHits]:
    """The search in Python, where rg is not there or not wanted; `check_cancelled` is called
    for every file (the run's interrupt, which cannot stop this thread otherwise)."""
    regex = _compile_regex(query)
    hits = []
    # Each file must still lie where the checks looked (the root is a real path: the checked
    # one): a folder swapped for a link during the walk would otherwise lead the search out of it.
    inside = str(query.root)
    with _pinned_folder(_start_folder(query)[0], query.root_shown):  # refuses a root swapped already
        for rel, path in _files_to_search(query):
            check_cancelled()
            text = _read_text(path, inside)
            if text is None:
                continue
            hit = _search_text(regex, text, query)
            if hit is not None:
                hit.rel = rel
                hits.append(hit)
    return hits


_NEWLINE_IN_PATTERN = re.compile(r"(?<!\\)(?:\\\\)*\\n|\n")


def _compile_regex(query: GrepQuery) -> re.Pattern[str]:
    flags = re.MULTILINE
    if query.ignore_case:
        flags |= re.IGNORECASE
    if query.multiline:
        flags |= re.DOTALL
    try:
        return re.compile(query.pattern, flags)
    except re.error as exc:
        raise ToolInputError(f"grep_search: invalid regular expression {query.pattern!r}: {exc}") from exc


def _files_to_search(query: GrepQuery) -> Iterator[tuple[str, Path]]:
    if query.root.is_file():
        yield "", query.root  # an explicitly named file is searched whatever the filters say
        return
    types = name_matcher(list(query.type_globs)) if query.type_globs else None
    has_whitelist = any(not glob.exclude for glob in query.globs)
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            entries = list(os.scandir(query.root / rel_dir if rel_dir else query.root))
        except OSError:
            continue
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                is_file = not is_dir and entry.is_file(follow_symlinks=False)
            except OSError:
                continue
            if is_dir and _override(query.globs, rel, True) is not False:
                stack.append(rel)
            elif is_file and _wanted_file(query.globs, has_whitelist, types, rel, entry.name):
                yield rel, Path(entry.path)


def _override(globs: tuple[FilterGlob, ...], rel: str, is_dir: bool) -> bool | None:
    """rg's override rule: the last matching glob decides (True include, False exclude)."""
    for glob in reversed(globs):
        if glob.matches(rel, is_dir):
            return not glob.exclude
    return None


def _wanted_file(globs: tuple[FilterGlob, ...], has_whitelist: bool,
                 types: re.Pattern[str] | None, rel: str, name: str) -> bool:
    decided = _override(globs, rel, False)
    if decided is not None:
        return decided
    if has_whitelist:
        return False
    return types is None or types.match(name) is not None


def _is_binary_file(path: Path) -> bool:
    try:
        data = path.read_bytes()
    except OSError:
        return True
    return not data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) and b"\0" in data


def _read_text(path: Path, inside: str) -> str | None:
    """The text of `path` (which must lie in `inside`), None for what is not searched."""
    try:
        data = read_checked(os.fspath(path), inside=inside)
    except OSError:  # unreadable, gone, a folder, or led out of `inside` (PathChanged)
        return None
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16", errors="replace")
    if b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace").removeprefix("\ufeff")


def _search_text(regex: re.Pattern[str], text: str, query: GrepQuery) -> FileHits | None:
    # A search of the whole text first: most files do not match at all.
    if regex.search(text) is None:
        return None
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()  # no line after the final newline
    if query.multiline:
        groups = _multiline_groups(regex, text, lines)
    else:
        groups = _line_groups(regex, lines, first_only=query.mode == "files_with_matches")
    if not groups:
        return None
    hit = FileHits("", count=len(groups))
    if query.mode == "content":
        hit.lines = _lines_with_context(groups, lines, query.before, query.after)
    return hit


def _line_groups(regex: re.Pattern[str], lines: list[str], first_only: bool) -> list[tuple[int, int]]:
    groups = []
    for index, line in enumerate(lines):
        if regex.search(line) is not None:
            groups.append((index, index))
            if first_only:
                break
    return groups


def _multiline_groups(regex: re.Pattern[str], text: str, lines: list[str]) -> list[tuple[int, int]]:
    """Line ranges (first, last; 0-based) of matches, merged like rg merges them.

    A match covers the lines from its first character to its last; a match
    that starts on the line where the previous one ended joins its group.
    """
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    groups: list[tuple[int, int]] = []
    for match in regex.finditer(text):
        begin, end = match.start(), match.end()
        first = bisect.bisect_right(starts, begin) - 1
        if first >= len(lines) or (begin == len(text) and text.endswith("\n")):
            continue
        last = bisect.bisect_right(starts, max(begin, end - 1)) - 1
        if groups and first <= groups[-1][1]:
            groups[-1] = (groups[-1][0], max(groups[-1][1], last))
        else:
            groups.append((first, last))
    return groups


def _lines_with_context(groups: list[tuple[int, int]], lines: list[str],
                        before: int, after: int) -> list[tuple[int, bool, str]]:
    matched: set[int] = set()
    shown: set[int] = set()
    for first, last in groups:
        matched.update(range(first, last + 1))
        shown.update(range(max(0, first - before), min(len(lines), last + after + 1)))
    return [(index + 1, index in matched, lines[index]) for index in sorted(shown)]


# ---- one formatter for both engines


def format_hits(query: GrepQuery, hits: list[FileHits]) -> str:
    hits = sorted(hits, key=lambda hit: hit.rel.split("/"))
    entries = _output_lines(query, hits)
    if not entries:
        return "No matches found"
    return _page(entries, query.offset, query.head_limit)


def _output_lines(query: GrepQuery, hits: list[FileHits]) -> list[str]:
    if query.mode == "files_with_matches":
        return [_shown(query, hit.rel) for hit in hits]
    if query.mode == "count":
        return [f"{_shown(query, hit.rel)}:{hit.count}" for hit in hits]
    out: list[str] = []
    for hit in hits:
        path = _shown(query, hit.rel)
        previous = None
        for number, is_match, text in hit.lines:
            if query.context and out and (previous is None or number != previous + 1):
                out.append("--")  # a gap: a new group of lines, as rg marks it
            previous = number
            out.append(_content_line(path, number, is_match, text, query.line_numbers))
    return out


def _shown(query: GrepQuery, rel: str) -> str:
    if not rel:
        return query.root_shown
    return rel if query.root_shown == "." else f"{query.root_shown.rstrip('/')}/{rel}"


def _content_line(path: str, number: int, is_match: bool, text: str, line_numbers: bool) -> str:
    sep = ":" if is_match else "-"
    text = text.removesuffix("\r")
    if len(text) > MAX_SHOWN_LINE:
        text = text[:MAX_SHOWN_LINE] + f" [... {len(text) - MAX_SHOWN_LINE} more characters]"
    return f"{path}{sep}{number}{sep}{text}" if line_numbers else f"{path}{sep}{text}"


def _page(entries: list[str], offset: int, limit: int) -> str:
    total = len(entries)
    end = total if limit == 0 else min(total, offset + limit)
    page = entries[offset:end]
    if not page:
        return f"(no results at offset {offset}; there are {total})"
    if offset == 0 and end == total:
        return "\n".join(page)
    note = f"(showing {offset + 1}-{end} of {total}"
    note += f"; use offset={end} for more)" if end < total else ")"
    return "\n".join(page + [note])
