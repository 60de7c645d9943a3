"""Whose cell it is, and an agent's cell as one `Bash` call.

A cell an agent started (through `notebook-run`, later `toolkernel serve`)
is itself a `Bash` call checked against the `Bash(...)` rules
(_bash_rules.py) before it starts, at the same ask point as any call
(`_preflight.ask_before_start`); a cell a person runs is theirs. The
`tools` calls inside either are checked by the dispatcher as always.

How a run is known to be an agent's: toolkernel's notebook-run puts
`{"toolkernel": {"started_by": "agent"}}` into the execute request's
metadata, which the kernel keeps as the parent of the running cell. The
agent gives only the code (or a cell id), never the message, so it cannot
drop the mark; any `toolkernel` key there counts as an agent's (a mark
it cannot read is not taken as a person's), and so does a kernel whose
parent message cannot be read.
"""

from __future__ import annotations

import sys

from ... import _loop
from ..._approval._bash_rules import TOOL_NAME, decide_bash
from ..._command._command import ToolsCommand
from ..._errors import Denied, InvalidInput
from ..._approval._policy import UNSANDBOXED, CallInfo, Decision, canonical_call_key
from .._preflight import ask_before_start

AGENT_KEY = "toolkernel"


def started_by_agent(shell) -> bool:
    kernel = getattr(shell, "kernel", None)
    if kernel is None:
        return False  # a terminal IPython: a person at the keyboard
    try:
        parent = kernel.get_parent("shell")
    except Exception:  # noqa: BLE001 - fail closed: an unknown starter is treated as an agent
        return True
    metadata = (parent or {}).get("metadata") or {}
    return AGENT_KEY in metadata


def in_agent_cell() -> bool:
    """Whether the code running now belongs to a cell an agent sent (False outside a kernel)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and started_by_agent(shell)


def agent_refusal(command: ToolsCommand, script: str, *, sandboxed: bool) -> str | None:
    """None when an agent's cell may start; else the error line of a cell that did not
    start (an ask that nobody answers now is recorded as the run's before-start stop).
    Unless it runs in the OS sandbox (`sandboxed`), it is put to a person whatever the rules
    allow: they are checked against the cell's text, which is never the guarantee."""
    decision = decide_bash(script, command.dispatcher.env.policy)
    if decision.action == "allow" and sandboxed:
        return None
    if decision.action == "allow":
        decision = Decision("ask", UNSANDBOXED)
    info = CallInfo(qualified_name=TOOL_NAME, command=TOOL_NAME, input={"command": script}, kind="execute")
    if decision.action == "deny":
        return Denied(f"an agent's bash cell: {decision.reason}; it did not start").json_line() + "\n"
    try:
        error = _loop.run(ask_before_start(command, info, decision.reason))
    except ValueError as exc:  # "always" for a cell that no single rule names
        return InvalidInput(f"an agent's bash cell: {exc}; it did not start").json_line() + "\n"
    if error is None:
        # Nothing checks this call again as it runs, so the once-grant that let it start is spent here.
        command.dispatcher.env.approvals.consume_once(canonical_call_key(info.qualified_name, info.input))
    return error
