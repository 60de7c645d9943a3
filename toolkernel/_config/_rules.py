"""The rule language of the `[policy]` lists, hooks' patterns and lasting approvals: a rule as
written, parsed once into a `Rule` (a tool rule, or a `Bash(...)` rule for agents' host cells),
and the modes a policy may name. Matching a rule against a call is the approval layer's
(`_approval/_policy.py`, `_approval/_bash_rules.py`); the syntax is told there."""

from __future__ import annotations

import functools
import json
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .._names import MCP_PREFIX, parse_qualified, qualified
# One folding rule for tool names, rule words and input keys.
from .._names import fold as _norm


# Loosest last: the admin ceiling keeps the effective mode at or left of it.
MODES = ("plan", "default", "accept-edits", "bypass-permissions")


@functools.lru_cache(maxsize=4096)  # asked for every rule on every call
def normalize_qualified_name(name: str) -> str:
    """`mcp__github__list-pulls` and `mcp_github__list_pulls` are one name."""
    parsed = parse_qualified(_norm(name))
    if parsed.kind == "mcp":
        return qualified("mcp", parsed.server, parsed.tool) if parsed.tool is not None \
            else MCP_PREFIX + parsed.server
    return _norm(name)


_WORD = re.compile(r"^[\w.*/:@+\-]+$")
_KEY = re.compile(r"^[\w.\-]+$")
_LOOKS_LIKE_MISSING_COMMA = re.compile(r"\s[\w.\-]+=")
_NEVER = re.compile(r"(?!)")


@dataclass(frozen=True)
class _Rule:
    text: str
    # One word: matched against qualified names and one-word commands.
    # Two words: matched against the command form only.
    name_pattern: "_NamePattern | None"
    command_pattern: re.Pattern[str]
    constraints: tuple["_Constraint", ...] = field(default=())


def _glob(pattern: str, star: str) -> str:
    return star.join(re.escape(part) for part in pattern.split("*"))


class Rule(str):
    """A rule as written, parsed once: what the config hands to the policy and hooks.

    It is its text (it compares, prints and serialises as the string), so reports and
    `Decision.rule` keep showing what the person wrote."""

    __slots__ = ("parsed",)
    parsed: _Rule

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a Rule cannot be changed")


def parse_rule(text: str) -> Rule:
    """Parse one rule; a malformed rule raises `ValueError` naming it."""
    if isinstance(text, Rule):
        return text
    if not isinstance(text, str):
        raise ValueError(f"a rule must be a string, not {type(text).__name__}")
    return _parse_cached(text)


@functools.lru_cache(maxsize=4096)  # the rules a Python hook or an approval names
def _parse_cached(text: str) -> Rule:
    try:
        parsed = _parse_rule(text)
    except ValueError as exc:
        raise ValueError(f"bad rule {text!r}: {exc}") from None
    rule = Rule(text)
    object.__setattr__(rule, "parsed", parsed)
    return rule


def _parse_rule(text: str) -> _Rule:
    stripped = text.strip()
    if not stripped:
        raise ValueError("the rule is empty")
    # hostbash (issue 13): `Bash(git *)` rules check agent-started %%bash cells
    # (_bash_rules.py); they name no tool, so they match no tool call.
    if is_bash_rule(stripped):
        parse_bash_rule(stripped)
        return _Rule(text, None, _NEVER)
    name_part, constraints = _split_constraints(stripped)
    words = name_part.split()
    if len(words) > 1 and words[0] == "tools":
        words = words[1:]
    if not words:
        raise ValueError("it names no tool")
    if len(words) > 2:
        raise ValueError("a command rule is `server tool` or `tool`, at most two words after `tools`")
    for word in words:
        if not _WORD.match(word):
            raise ValueError(f"{word!r} is not a tool name or glob")
    words = [_norm(w) for w in words]
    # `*` in the server word stays inside it; in the tool word it takes the
    # rest, so `github *` still covers a tool whose (invalid) name has a space.
    stars = ["[^ ]*", ".*"] if len(words) == 2 else ["[^ ]*"]
    command = re.compile(" ".join(_glob(w, star) for w, star in zip(words, stars)))
    name = _name_pattern(words[0]) if len(words) == 1 else None
    return _Rule(text, name, command, constraints)


@dataclass(frozen=True)
class _NamePattern:
    """A one-word rule against flat tool names.

    `mcp_` and `tool__` rules match the server and tool parts each on its own,
    so neither `mcp_foo` nor a `*` in its server part reaches past the
    server/tool boundary (`mcp_foo` does not cover a server `foo-x`'s tools).
    """

    kind: str | None
    first: re.Pattern[str]  # the whole name (bare rules), or the server
    tool: re.Pattern[str] | None = None  # None: every tool of the server

    def matches(self, name: str) -> bool:
        if self.kind is None:
            return self.first.fullmatch(name) is not None
        parsed = parse_qualified(name)
        if parsed.kind != self.kind or parsed.tool is None:
            return False
        if self.kind == "command":
            return self.first.fullmatch(parsed.tool) is not None
        return self.first.fullmatch(parsed.server) is not None and (
            self.tool is None or self.tool.fullmatch(parsed.tool) is not None)


def _name_pattern(word: str) -> _NamePattern:
    parsed = parse_qualified(normalize_qualified_name(word))
    if parsed.kind == "mcp":
        tool = None if parsed.tool is None else re.compile(_glob(parsed.tool, ".*"))
        return _NamePattern("mcp", re.compile(_glob(parsed.server, ".*")), tool)
    return _NamePattern(parsed.kind, re.compile(_glob(parsed.tool, ".*")))


class _Constraint(NamedTuple):
    key: str
    pattern: re.Pattern[str]  # the glob, against the value as written
    # The glob with `.` and `..` folded (`./src/*` is `src/*`), against a path argument's forms.
    as_path: re.Pattern[str]
    exact: bool = False  # the glob has no `*`: it names one value (one path)


def _constraint(key: str, glob: str) -> _Constraint:
    pattern = re.compile(_glob(glob, ".*"), re.DOTALL)
    folded = posixpath.normpath(glob) if glob else glob
    if folded.startswith("//"):  # normpath keeps a leading `//`; a real path has one `/`
        folded = "/" + folded.lstrip("/")
    as_path = pattern if folded == glob else re.compile(_glob(folded, ".*"), re.DOTALL)
    return _Constraint(key, pattern, as_path, "*" not in glob)


def _split_constraints(text: str) -> tuple[str, tuple[_Constraint, ...]]:
    if "(" not in text:
        if ")" in text:
            raise ValueError("')' without '('")
        return text, ()
    if not text.endswith(")"):
        raise ValueError("an input constraint `(key=glob, ...)` must end the rule")
    name, body = text[:-1].split("(", 1)
    if not name.strip():
        raise ValueError("it names no tool")
    return name, _parse_constraints(body)


def _parse_constraints(body: str) -> tuple[_Constraint, ...]:
    pairs: list[_Constraint] = []
    rest = body.strip()
    if not rest:
        raise ValueError("empty input constraint `()`")
    while True:
        key, sep, rest = rest.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"constraint {key!r} has no `=`")
        if not _KEY.match(key):
            raise ValueError(f"{key!r} is not an input key")
        value, rest = _constraint_value(rest.lstrip())
        pairs.append(_constraint(key, value))
        if not rest:
            return tuple(pairs)
        if not rest.startswith(","):
            raise ValueError(f"expected ',' between constraints, found {rest[:10]!r}")
        rest = rest[1:].strip()
        if not rest:
            raise ValueError("a trailing ',' in the input constraint")


def _constraint_value(text: str) -> tuple[str, str]:
    if text.startswith('"'):
        try:
            value, end = json.JSONDecoder().raw_decode(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"unterminated quoted value: {exc.msg}") from None
        return value, text[end:].strip()
    value, comma, rest = text.partition(",")
    if "(" in value or ")" in value or '"' in value:
        raise ValueError(f"quote a value holding parentheses or quotes as a JSON string: {value.strip()!r}")
    if _LOOKS_LIKE_MISSING_COMMA.search(value):
        raise ValueError(f"missing ',' between constraints in {value.strip()!r}? Quote the value if it is one")
    return value.strip(), comma + rest


_RULE = re.compile(r"^\s*bash\s*\((.*)\)\s*$", re.IGNORECASE | re.DOTALL)


def is_bash_rule(text: str) -> bool:
    return isinstance(text, str) and _RULE.match(text) is not None


@functools.lru_cache(maxsize=1024)
def parse_bash_rule(text: str) -> tuple[str, ...]:
    """The rule's words; `ValueError` for a malformed one."""
    match = _RULE.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a Bash(...) rule")
    try:
        words = tuple(shlex.split(match.group(1)))
    except ValueError as exc:
        raise ValueError(f"bad rule {text!r}: {exc}") from None
    if not words:
        raise ValueError(f"bad rule {text!r}: give a command prefix, or `*` for every command")
    return words
