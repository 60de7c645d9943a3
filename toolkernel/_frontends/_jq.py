"""`jq=` of `toolkernel.call` and `--jq` of `%tools`: a jq filter over a result, in Python.

The `jq` package (libjq), so a filter means what it means in a script's `jq`. The filter
is compiled before the call: a bad one makes no call. The result is every output of the
filter: exactly one output is that value, any other number (none, several) a list.
"""

from __future__ import annotations

from typing import Any

from .._errors import InvalidInput


def compiled(text: str) -> Any:
    """The program of the filter `text`; `InvalidInput` in one line when jq cannot read it."""
    import jq

    if not isinstance(text, str):
        raise InvalidInput(f"jq: the filter must be a string, not {type(text).__name__}")
    try:
        return jq.compile(text)
    except ValueError as exc:
        raise InvalidInput(f"jq: {_first_line(exc)}") from None


def outputs(program: Any, value: Any) -> Any:
    """`program` run on `value`: its one output, or a list of them all (none, or several)."""
    try:
        found = program.input_value(value).all()
    except (ValueError, TypeError) as exc:  # a runtime error of the filter; a value not JSON
        raise InvalidInput(f"jq: {_first_line(exc)}") from None
    return found[0] if len(found) == 1 else found


def _first_line(exc: Exception) -> str:
    """jq's message without its `jq: error: ` prefix and the lines that draw the filter."""
    line = (str(exc).strip().splitlines() or ["the filter failed"])[0]
    return line.removeprefix("jq: error: ")
