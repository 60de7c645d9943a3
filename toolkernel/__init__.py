"""toolkernel: Tools in Shell for Jupyter.

`%load_ext toolkernel`, then in a cell:

    %%tools
    tools --help

From Python: `toolkernel.call("github", "list-pulls", repo="acme/api")`.
"""

from __future__ import annotations

from concurrent.futures import Future as _Future
from typing import Any as _Any

from . import _imports

_imports.install()  # first: what toolkernel imports later never comes from the working directory

from ._errors import (
    CallError, CallLimit, ConfigError, ConnectionRequired, Denied, InvalidInput, NeedsApproval,
    Stopped, ToolFailed, ToolInputError, ToolkernelError, Unavailable, UnknownCommand,
)
from ._approval._hooks import HookOutcome, redact
from ._tool import Image, Tool, ToolContext, ToolResult, tool

__version__ = "0.1.0"

__all__ = [
    "CallError", "CallLimit", "ConfigError", "ConnectionRequired", "Denied", "HookOutcome", "Image",
    "InvalidInput", "NeedsApproval", "Stopped", "Tool", "ToolContext", "ToolFailed", "ToolInputError",
    "ToolResult", "ToolkernelError", "Unavailable", "UnknownCommand",
    "after_call", "approve", "before_call", "call", "deny", "get_session",
    "load_ipython_extension", "redact", "register_tools", "run", "tool", "unload_ipython_extension",
]

_default_session = None


def get_session():
    """The session of this process (created on first use, in the current directory)."""
    global _default_session
    if _default_session is None:
        from ._session import Session

        _default_session = Session()
    if isinstance(_default_session, _Future):  # %load_ext starts it in the background
        _default_session = _default_session.result()
    return _default_session


def call(*command: str, input: dict[str, _Any] | None = None, jq: str | None = None, **arguments: _Any) -> _Any:
    """Call one tool like `tools` would: `call("github", "list-pulls", repo="acme/api")`.

    Returns the result as a Python value (dict/list for JSON, str for text);
    raises a `CallError` subclass with the seed's error code otherwise.
    `jq=".[] | .number"` runs a jq filter over the result: its one output, or a list of
    all its outputs when there are none or several. A filter jq cannot read raises
    `InvalidInput` before any call. (A tool's own argument named `jq` goes in `input`.)
    """
    from ._frontends import _jq
    from ._frontends._direct import call_argv

    program = None if jq is None else _jq.compiled(jq)
    argv = [*command, *(f"{k}={_arg(v)}" for k, v in arguments.items())]
    return call_argv(get_session(), argv, base=input, jq=program)


def _arg(value: _Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value)


def run(script: str):
    """Run a `tools` script from Python, printing its output; returns a `ShellResult`."""
    from ._frontends._cli_sink import PrintSink
    from ._runners._hostbash._cell import in_agent_cell

    return get_session().run_script(script, PrintSink(), agent=in_agent_cell())


def register_tools(*tools: Tool) -> None:
    """Add tools made with `@toolkernel.tool` as top-level commands (`tools <name>`) from the next run on.

    They go through the approval layer like every other tool. A name another
    tool or a configured MCP server already uses raises `ConfigError`.
    """
    get_session().register_tools(list(tools))


def before_call(pattern: str = "*"):
    """Register `fn(call) -> HookOutcome | None` to run before matching calls. A person's: its
    `allow` acts as an allow rule, so a cell an agent sent (notebook-run) gets `Denied`."""
    __tracebackhide__ = True
    from ._frontends._answers import refuse_agents

    refuse_agents("toolkernel.before_call", "pre-call hooks are a person's (a hook's allow acts as an allow rule)",
                  "a person registers hooks in a cell of their own")
    return get_session().hooks.before_call(pattern)


def after_call(pattern: str = "*"):
    """Register `fn(call, result) -> ToolResult | None` to see results first."""
    return get_session().hooks.after_call(pattern)


def approve(*, always: bool = False) -> str:
    """Approve the last call that asked (once, or always for that tool). A person's answer: in a
    cell an agent sent (notebook-run) it raises `Denied`, as `deny()` does."""
    __tracebackhide__ = True
    from ._frontends._answers import approve as _approve

    return _approve(get_session(), always=always)


def deny() -> str:
    """Deny the last call that asked (a person's answer, as `approve()`)."""
    __tracebackhide__ = True
    from ._frontends._answers import deny as _deny

    return _deny(get_session())


def load_ipython_extension(ipython) -> None:
    global _default_session
    from ._frontends._magic import load

    _default_session = load(ipython)


def unload_ipython_extension(ipython) -> None:
    global _default_session
    from ._frontends._magic import unload

    unload(_default_session)
    _default_session = None


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """The Jupyter Server extension (enabled by the jupyter-config file the wheel installs): the
    calls waiting for a person, listed and answered for JupyterLab (`_frontends/_lab_server.py`)."""
    return [{"module": "toolkernel._frontends._lab_server"}]


# Public names print as `toolkernel.X`, not the private module they live in.
for _name in __all__:
    _value = globals()[_name]
    if getattr(_value, "__module__", "").startswith("toolkernel."):
        _value.__module__ = "toolkernel"
del _name, _value
