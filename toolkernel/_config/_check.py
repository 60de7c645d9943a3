"""Checking one value of a config file; each failure is a `ConfigError` naming file and key.

The section modules build their frozen dataclasses from values these have checked,
so nothing downstream checks them again.
"""

from __future__ import annotations

import difflib
import json
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from ._sources import Source


def join(prefix: str | None, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def type_name(source: "Source", value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    names = {str: "a string", int: "an integer", float: "a float", list: "an array",
             dict: "an object" if source.is_json else "a table", type(None): "null"}
    return names.get(type(value), "a date/time")


def expect(source: "Source", key: str | None, value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    # bool is an int in Python, never in a config file
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise source.error(key, f"expected {what}, got {type_name(source, value)}")
    return value


def table(source: "Source", key: str | None, value: Any) -> dict[str, Any]:
    return expect(source, key, value, dict, "an object" if source.is_json else "a table")


def string(source: "Source", key: str, value: Any, *, empty_ok: bool = True) -> str:
    expect(source, key, value, str, "a string")
    if not value and not empty_ok:
        raise source.error(key, "must not be empty")
    return value


def boolean(source: "Source", key: str, value: Any) -> bool:
    return expect(source, key, value, bool, "true or false")


def string_list(source: "Source", key: str, value: Any, *, empty_ok: bool = True) -> tuple[str, ...]:
    expect(source, key, value, list, "an array of strings")
    for index, item in enumerate(value):
        string(source, f"{key}[{index}]", item, empty_ok=False)
    if not value and not empty_ok:
        raise source.error(key, "must not be empty")
    return tuple(value)


def string_table(source: "Source", key: str, value: Any) -> dict[str, str]:
    checked = table(source, key, value)
    for name, item in checked.items():
        string(source, join(key, name), item)
    return dict(checked)


def positive_number(source: "Source", key: str, value: Any) -> float:
    expect(source, key, value, (int, float), "a number of seconds")
    if not value > 0:
        raise source.error(key, "expected a number of seconds greater than 0")
    return value


def choice(source: "Source", key: str, value: Any, allowed: tuple[str, ...]) -> str:
    if isinstance(value, str) and value in allowed:
        return value
    quoted = [json.dumps(a) for a in allowed]
    wanted = " or ".join(quoted) if len(quoted) <= 2 else "one of " + ", ".join(quoted)
    got = json.dumps(value) if isinstance(value, str) else type_name(source, value)
    raise source.error(key, f"expected {wanted}, got {got}")


def known_keys(source: "Source", prefix: str | None, checked: Mapping[str, Any],
               allowed: tuple[str, ...]) -> None:
    """Each unknown key is its own problem; the first is raised after the rest are noted."""
    unknown = [_unknown(source, prefix, key, allowed) for key in checked if key not in allowed]
    if unknown:
        source.problems.extend(unknown[1:])
        raise unknown[0]


def _unknown(source: "Source", prefix: str | None, key: str, allowed: tuple[str, ...]):
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f' (did you mean "{close[0]}"?)' if close else ""
    return source.error(join(prefix, key), f"unknown key{hint}; allowed here: {', '.join(allowed)}")
