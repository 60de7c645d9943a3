"""One host `%%bash` cell: prepare the run, check an agent's cell, run it.

A cell an agent started (through `notebook-run`, later `toolkernel serve`)
is itself a `Bash` call checked against the `Bash(...)` rules
(_bash_rules.py) before it starts; a cell a person runs is theirs. The
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

import subprocess
from pathlib import Path

from .. import _loop
from .._bash_rules import TOOL_NAME, decide_bash
from .._command import ToolsCommand
from .._errors import Denied
from .._policy import CallInfo, canonical_call_key
from .._preflight import _not_started
from .._shell import ShellResult, Sink
from ._channel import Channel
from ._runner import run_foreground, start_background

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


def check_agent_cell(command: ToolsCommand, script: str) -> ShellResult | None:
    """None when the agent's cell may start; else the result of a cell that did not start."""
    env = command.dispatcher.env
    decision = decide_bash(script, env.policy)
    if decision.action == "allow":
        return None
    info = CallInfo(qualified_name=TOOL_NAME, command=TOOL_NAME, input={"command": script}, kind="execute")
    if decision.action == "deny":
        run = command.run
        run.before_start = True
        run.stopped = {"reason": "denied", "call": {"tool": TOOL_NAME, "input": dict(info.input)}}
        line = Denied(f"an agent's bash cell: {decision.reason}; it did not start").json_line() + "\n"
        return ShellResult(exit_code=1, stdout="", stderr=line, report=run.report(1))
    if env.approvals.consume_once(canonical_call_key(info.qualified_name, info.input)):
        return None
    return _not_started(command, info, decision.reason)


def _prepare(session, script: str, agent: bool) -> tuple[ToolsCommand, ShellResult | None]:
    command = _loop.run(session.prepare())
    return command, check_agent_cell(command, script) if agent else None


def run_cell(session, channel: Channel, script: str, sink: Sink, *, agent: bool,
             timeout: float | None = None) -> ShellResult:
    command, stopped = _prepare(session, script, agent)
    if stopped is not None:
        sink.stderr(stopped.stderr)
        return stopped
    return run_foreground(channel, command, script, sink, Path(session.workdir), timeout=timeout)


def start_cell(session, channel: Channel, script: str, sink: Sink, *, agent: bool, keep_stdout: bool,
               keep_stderr: bool, timeout: float | None = None) -> subprocess.Popen | ShellResult:
    """`--bg`: the process, or the result of a cell that did not start."""
    command, stopped = _prepare(session, script, agent)
    if stopped is not None:
        sink.stderr(stopped.stderr)
        return stopped
    return start_background(channel, command, script, Path(session.workdir), keep_stdout=keep_stdout,
                            keep_stderr=keep_stderr, timeout=timeout)
