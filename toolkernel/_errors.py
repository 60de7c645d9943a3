"""Every exception toolkernel raises, in one tree.

    ToolkernelError
     ├── ConfigError            a config file is unreadable or wrong (names file and key),
     │   │                      or two sources of tools claim one name
     │   └── ConfigErrors       several at once (`errors`), reported together
     ├── RewindError            a rewind that cannot be done (no such run, files changed since,
     │                          a damaged entry): nothing was restored, or the files named were not
     ├── ToolInputError         raised by a tool's own function for input it cannot use;
     │   │                      the `tool()` wrapper turns it into the tool's error result
     │   └── NotReadYet         a notebook to change that this session has not read (the
     │                          before-start check knows a read earlier in the script does)
     └── CallError              a `tools` call did not produce a result; `code` is the
         │                      seed's error code, shown as one JSON line on stderr
         ├── UnknownCommand         unknown_command
         ├── InvalidInput           invalid_input
         ├── ToolFailed             tool_error (the tool ran and failed)
         ├── Denied                 denied
         ├── NeedsApproval          needs_approval
         ├── Stopped                stopped
         ├── ConnectionRequired     connection_required
         ├── CallLimit              call_limit
         └── Unavailable            unavailable (`retryable` says whether a retry may work)

A tool that runs and fails is a *result* (`ToolResult.is_error`), not an exception:
the `tools` command prints it as a `tool_error` line (exit code 1), and the Python
API (`toolkernel.call`, `%tools x`) raises it as `ToolFailed`. Errors of the
libraries we use are translated where they enter, with `raise ... from exc`.

Four exceptions stay inside one module and never reach a caller, so they are not
in the tree: `_hooks.HookFailed` (a hook gave no usable answer; the call is then
denied), `_answers.AnswerError` (shown as a `UsageError` by `%tools`),
`_tools._glob.GlobError` (a `ValueError` for a bad pattern, an error result of the
tool) and `_tools.web.Refused` (a `ToolInputError` for a URL it will not fetch).
"""

from __future__ import annotations

import json
from typing import Any


class ToolkernelError(Exception):
    """Base of every toolkernel error."""


class RewindError(ToolkernelError):
    """A rewind that cannot be done (no such run, files changed since, a damaged entry)."""


def printable(text: str, *, keep: str = "") -> str:
    """`text` with every character that is not printable (but those in `keep`) written as
    Python writes it in a string literal (`\\x1b`, `\\u202e`, `\\n`).

    Names and values from a config file reach a terminal in messages (`toolkernel lint`, a
    kernel's start): raw, a key like "\\x1b[2J\\x1b]52;c;...\\x07" clears the screen or
    writes the clipboard, and a bidi override makes the line read otherwise."""
    if text.isprintable():
        return text  # the usual case, in one pass of C
    return "".join(ch if ch.isprintable() or ch in keep else repr(ch)[1:-1] for ch in text)


def printable_json(text: str) -> str:
    """JSON text (written with `ensure_ascii=False`) with each character that is not printable
    written as its JSON escape (`\\u202e`): the same value for a parser, inert on a terminal or
    a page. JSON escapes only C0 controls itself; a C1 control (U+009B is a one-byte CSI) or a
    bidi override went out raw. Line breaks stay (outside strings, JSON has only those)."""
    if text.isprintable():
        return text  # the usual case, in one pass of C
    return "".join(ch if ch.isprintable() or ch == "\n" else json.dumps(ch)[1:-1] for ch in text)


class ConfigError(ToolkernelError):
    def __init__(self, path: str, key: str | None, problem: str) -> None:
        # Each part may hold text from the file (a key, a value quoted in the problem): escaped
        # here, where it enters the message. A problem's own line breaks stay.
        path, problem = printable(path), printable(problem, keep="\n")
        key = printable(key) if key is not None else None
        self.path, self.key, self.problem = path, key, problem
        where = f"{path}: {key}" if key else path
        super().__init__(f"{where}: {problem}")

    @property
    def errors(self) -> tuple["ConfigError", ...]:
        """Each problem on its own (a config with several is reported at once)."""
        return (self,)


class ConfigErrors(ConfigError):
    """Several config problems at once: it reads as the first, then the others, one a line."""

    def __init__(self, errors: list[ConfigError]) -> None:
        first = errors[0]
        super().__init__(first.path, first.key, first.problem)
        self._errors = tuple(errors)
        self.args = ("\n".join(str(error) for error in errors),)

    @property
    def errors(self) -> tuple[ConfigError, ...]:
        return self._errors


class ToolInputError(ToolkernelError):
    """Raise it from a tool function for a failure the caller should read as the tool's result."""


class NotReadYet(ToolInputError):
    """The call changes a notebook this session has not read (`path`, as the call names it)."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


class CallError(ToolkernelError):
    code = "tool_error"
    retryable = False

    def __init__(self, message: str, *, retryable: bool | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        if retryable is not None:
            self.retryable = retryable
        self.details = details

    def to_json(self) -> dict[str, Any]:
        error = {"code": self.code, "message": self.message, "retryable": self.retryable}
        error.update(self.details)
        return {"error": error}

    def json_line(self) -> str:
        # A message quotes tool names and inputs, which a server or a script chose.
        return printable_json(json.dumps(self.to_json(), ensure_ascii=False, default=str))

    def _render_traceback_(self) -> list[str]:
        """What IPython shows for it in a cell: its one line, not the frames of the call's way
        through toolkernel (a missing argument was 90 lines through the event loop bridge)."""
        return [f"{type(self).__name__}: {printable(self.message)}"]


class UnknownCommand(CallError):
    code = "unknown_command"


class InvalidInput(CallError):
    code = "invalid_input"


class ToolFailed(CallError):
    code = "tool_error"


class Denied(CallError):
    code = "denied"


class NeedsApproval(CallError):
    code = "needs_approval"


class Stopped(CallError):
    code = "stopped"


class ConnectionRequired(CallError):
    code = "connection_required"


class CallLimit(CallError):
    code = "call_limit"


class Unavailable(CallError):
    code = "unavailable"
    retryable = True


ERROR_CODES = {cls.code: cls for cls in (
    UnknownCommand, InvalidInput, ToolFailed, Denied, NeedsApproval, Stopped,
    ConnectionRequired, CallLimit, Unavailable,
)}
