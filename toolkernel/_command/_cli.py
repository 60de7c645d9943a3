"""Parsing of the `tools` command line: which command, and the call's input.

Pure functions, no I/O: the builtin hands in argv, stdin and the tool's
schema, and gets back what to do.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from collections.abc import Mapping  # isinstance with typing.Mapping costs several us per check
from typing import Any, Callable

from .._errors import InvalidInput

HELP_FLAGS = ("--help", "-h")
_HELP_WORDS = frozenset(HELP_FLAGS)
# Deeper input is refused up front: Python's JSON parser, the schema check and
# everything after them recurse, and would fail with RecursionError on it.
MAX_INPUT_DEPTH = 100


@dataclass(frozen=True)
class Command:
    """One `tools` invocation, before the tool is looked up.

    action: "help" (top-level), "server_help", "tool_help", "search" or "call".
    """

    action: str
    server: str | None = None
    tool: str | None = None
    args: tuple[str, ...] = field(default_factory=tuple)


def split_command(
    argv: list[str],
    is_server: Callable[[str], bool],
    split_qualified: Callable[[str], tuple[str, str] | None] = lambda w: None,
) -> Command:
    if not argv or argv[0] in (*HELP_FLAGS, "help"):
        return Command("help")
    head, rest = argv[0], argv[1:]
    if head == "search":
        return Command("search", args=tuple(rest))
    if is_server(head):
        return _server_command(head, rest)
    qualified = split_qualified(head)
    if qualified and is_server(qualified[0]):
        return _tool_command(qualified[0], qualified[1], rest)
    return _tool_command(None, head, rest)


def _server_command(server: str, rest: list[str]) -> Command:
    if not rest or rest[0] in HELP_FLAGS:
        return Command("server_help", server=server)
    return _tool_command(server, rest[0], rest[1:])


def _tool_command(server: str | None, tool: str, rest: list[str]) -> Command:
    action = "tool_help" if not _HELP_WORDS.isdisjoint(rest) else "call"
    return Command(action, server=server, tool=tool, args=tuple(rest))


# -- input -----------------------------------------------------------------


def take_save(args: tuple[str, ...], schema: Mapping[str, Any]) -> tuple[str | None, tuple[str, ...]]:
    """`--save PATH` out of a call's words: the result goes to that file, not to stdout.

    A tool whose own input has a `save` key keeps `--save` for itself."""
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if "--save" not in args or (isinstance(properties, Mapping) and "save" in properties):
        return None, args
    at = args.index("--save")
    if at + 1 >= len(args):
        raise InvalidInput("--save needs a file path: `tools <tool> ... --save out.json`")
    return args[at + 1], args[:at] + args[at + 2:]


def parse_input(args: tuple[str, ...] | list[str], schema: Mapping[str, Any], stdin: str | None) -> dict[str, Any]:
    """Merge a JSON argument (or stdin), then key=value / --key value pairs over it.

    stdin is read only when `-` is given, or when no input argument is given
    at all and it holds data, so `tools` inside `while read` never eats the
    loop's input.
    """
    args = list(args)
    base: dict[str, Any] = {}
    if "-" in args or (not args and stdin and stdin.strip()):
        base = _json_object(stdin or "", "stdin")
    pairs = _Pairs(schema)
    i = 0
    while i < len(args):
        i = pairs.take(args, i, base)
    return {**base, **pairs.values}


class _Pairs:
    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema = schema
        properties = schema.get("properties")
        self.properties = properties if isinstance(properties, Mapping) else {}  # a broken schema is the validator's to report
        self.values: dict[str, Any] = {}
        self.json_seen = False

    def take(self, args: list[str], i: int, base: dict[str, Any]) -> int:
        word = args[i]
        if word == "-":
            return i + 1
        if word.lstrip().startswith(("{", "[")) or word.strip() == "null":
            if self.json_seen:
                raise InvalidInput("more than one JSON input argument; give one and add key=value pairs")
            self.json_seen = True
            base.update(_json_object(word, "the JSON argument"))
            return i + 1
        if word.startswith("--") and len(word) > 2:
            return self._option(args, i)
        key, eq, value = word.partition("=")
        if eq and key:
            self.values[key] = self._value(key, value)
            return i + 1
        raise InvalidInput(
            f"unexpected argument {word!r}: give input as '{{...}}' JSON, key=value or --key value"
            + self._guess(word, base)
        )

    def _guess(self, word: str, base: dict[str, Any]) -> str:
        """The required key a bare word most likely meant (`read-file notes.txt`): the first not
        given yet, or the first whose type is the word's own (`get-pull 101`: the integer key)."""
        required = self.schema.get("required")
        given = {**base, **self.values}
        missing = [key for key in required if isinstance(key, str) and key not in given] if isinstance(required, list) else []
        if not missing:
            return ""
        kind = _json_kind(word)
        typed = [key for key in missing if kind is not None and kind in _declared_types(self.schema, key)]
        return f" (did you mean {shlex.quote(f'{(typed or missing)[0]}={word}')}?)"

    def _option(self, args: list[str], i: int) -> int:
        key, eq, value = args[i][2:].partition("=")
        if eq:
            self.values[key] = self._value(key, value)
            return i + 1
        has_value = i + 1 < len(args) and not args[i + 1].startswith("--")
        if _is_boolean(self.properties.get(key)) or not has_value:
            self.values[key] = True
            return i + 1
        self.values[key] = self._value(key, args[i + 1])
        return i + 2

    def _value(self, key: str, text: str) -> Any:
        if _is_string(self.properties.get(key)):
            return text
        try:
            value = json.loads(text)
        except ValueError:
            return text
        except RecursionError:
            value = _TOO_DEEP
        _check_depth(value, f"the value of {key!r}")
        return value


def _types(prop: Any) -> set[str]:
    if not isinstance(prop, Mapping):
        return set()
    t = prop.get("type")
    if isinstance(t, str):
        return {t}
    if isinstance(t, list):
        return set(t)
    if "enum" in prop and all(isinstance(v, str) for v in prop["enum"]):
        return {"string"}
    variants = prop.get("anyOf") or prop.get("oneOf") or []
    return set().union(*(_types(v) for v in variants)) if variants else set()


def _is_string(prop: Any) -> bool:
    return _types(prop) - {"null"} == {"string"}


def _is_boolean(prop: Any) -> bool:
    return _types(prop) - {"null"} == {"boolean"}


def _json_object(text: str, where: str) -> dict[str, Any]:
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidInput(f"{where} is not valid JSON: {exc}") from exc
    except RecursionError:
        value = _TOO_DEEP
    _check_depth(value, where)
    if value is None:
        return {}  # seed 003: empty or null input is no input
    if not isinstance(value, dict):
        raise InvalidInput(f"{where} must be a JSON object, got {type(value).__name__}")
    return value


_TOO_DEEP = object()  # what json.loads gave up on


def _check_depth(value: Any, where: str) -> None:
    """Refuse JSON nested deeper than MAX_INPUT_DEPTH (walked without recursion)."""
    level: list[Any] = [value]
    for _ in range(MAX_INPUT_DEPTH):
        if any(item is _TOO_DEEP for item in level):
            break
        level = [child for item in level if isinstance(item, (dict, list))
                 for child in (item.values() if isinstance(item, dict) else item)]
        if not level:
            return
    raise InvalidInput(f"{where} is nested more than {MAX_INPUT_DEPTH} levels deep")


def _json_kind(word: str) -> str | None:
    """The JSON type a bare word reads as, when it is not text: "integer", "number" or "boolean"."""
    if word in ("true", "false"):
        return "boolean"
    try:
        value = json.loads(word)
    except ValueError:
        return None
    return "integer" if type(value) is int else "number" if type(value) is float else None


def _declared_types(schema: Mapping[str, Any], key: str) -> set[str]:
    """The JSON types the schema declares for `key` (none when it says nothing a word could meet)."""
    properties = schema.get("properties")
    declared = properties.get(key) if isinstance(properties, Mapping) else None
    named = declared.get("type") if isinstance(declared, Mapping) else None
    types = {t for t in (named if isinstance(named, list) else [named]) if isinstance(t, str)}
    return types | {"integer"} if "number" in types else types  # a number key takes an integer too
