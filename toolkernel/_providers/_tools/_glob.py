"""Glob patterns as regular expressions, shared by glob_search and grep_search.

Two flavours:
  * `compile_path_glob` – a shell glob over a path relative to the search
    folder: `*` and `?` stay inside one path component, `**` as a whole
    component spans any number of folders, `{a,b}` chooses, `[a-z]` / `[!a]`.
  * `FilterGlob` – ripgrep's `--glob` rule for grep_search: a pattern without
    a slash matches a file name at any depth, one with a slash is anchored at
    the search folder, a leading `!` excludes, a trailing `/` means folders.

Both compile to one `re` pattern so the built-in grep and the `rg` path agree
with each other (rg receives the same glob and applies the same rules).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class GlobError(ValueError):
    """A glob pattern that cannot be compiled (unclosed brace, ...)."""


def compile_path_glob(pattern: str) -> re.Pattern[str]:
    return re.compile(f"(?s:{_translate(pattern)})\\Z")


def _translate(pattern: str) -> str:
    out: list[str] = []
    depth = 0
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        at_component_start = i == 0 or pattern[i - 1] == "/" or (depth > 0 and pattern[i - 1] in "{,")
        if c == "*" and pattern.startswith("**", i) and at_component_start:
            after = pattern[i + 2 : i + 3]
            if after == "/":
                out.append("(?:.*/)?")
                i += 3
                continue
            if after == "" or (depth and after in ",}"):
                out.append(".*")
                i += 2
                continue
        if c == "*":
            while i + 1 < n and pattern[i + 1] == "*":
                i += 1
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            klass, i = _character_class(pattern, i)
            out.append(klass)
            continue
        elif c == "{":
            depth += 1
            out.append("(?:")
        elif c == "}" and depth:
            depth -= 1
            out.append(")")
        elif c == "," and depth:
            out.append("|")
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    if depth:
        raise GlobError(f"unclosed '{{' in glob {pattern!r}")
    return "".join(out)


def _character_class(pattern: str, start: int) -> tuple[str, int]:
    """The regex for `[...]` starting at `start`, and the index after it."""
    i = start + 1
    negated = i < len(pattern) and pattern[i] in "!^"
    if negated:
        i += 1
    first = i
    while i < len(pattern) and (pattern[i] != "]" or i == first):
        i += 1
    if i >= len(pattern):
        return re.escape("["), start + 1  # no closing bracket: a literal "["
    body = "".join(ch if ch == "-" else re.escape(ch) for ch in pattern[first:i])
    # a class never matches the path separator, like `*` and `?`
    return (f"[^/{body}]" if negated else f"[{body}]"), i + 1


@dataclass(frozen=True)
class FilterGlob:
    """One ripgrep-style `--glob` filter."""

    source: str
    regex: re.Pattern[str]
    exclude: bool
    dirs_only: bool

    @classmethod
    def parse(cls, glob: str) -> "FilterGlob":
        body = glob
        exclude = body.startswith("!")
        if exclude:
            body = body[1:]
        dirs_only = body.endswith("/")
        body = body.rstrip("/")
        if body.startswith("/"):
            body = body[1:]
        elif "/" not in body:
            body = "**/" + body
        return cls(glob, compile_path_glob(body), exclude, dirs_only)

    def matches(self, rel_path: str, is_dir: bool) -> bool:
        if self.dirs_only and not is_dir:
            return False
        return self.regex.match(rel_path) is not None


def name_matcher(globs: list[str]) -> re.Pattern[str]:
    """One regex matching a file name against any of `globs` (file types)."""
    return re.compile("|".join(f"(?s:{_translate(g)})\\Z" for g in globs))
