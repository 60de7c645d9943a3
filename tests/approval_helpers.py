"""Helpers for the approval tests: project configs, a recording sink, a real kernel.

The kernel helper talks to a real IPython kernel through jupyter_client and
collects what a notebook frontend would see (streams, display_data bundles,
the error of a failed cell), so the tests check what a person is shown.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernel_helpers import RecordingSink, started_kernel
from toolkernel._approval._approver import Answer, ApprovalRequest

REPO = Path(__file__).resolve().parent.parent
SERVERS = REPO / "tests" / "servers"
REPORT_MIME = "application/vnd.toolkernel.report+json"
WAIT = 180  # generous bound for one cell on a loaded, shared machine


# -- project configs ---------------------------------------------------------------


def toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def toml_list(values: list[str]) -> str:
    return "[" + ", ".join(toml_string(v) for v in values) + "]"


def demo_server_section() -> str:
    return (f"[mcp_servers.github]\ncommand = {toml_string(sys.executable)}\n"
            f"args = [{toml_string(str(SERVERS / 'demo.py'))}]\n")


def recorder_server_section(record_file: Path) -> str:
    """The recorder fixture as server `github`: its changing calls append to `record_file`."""
    return (f"[mcp_servers.github]\ncommand = {toml_string(sys.executable)}\n"
            f"args = [{toml_string(str(SERVERS / 'recorder.py'))}]\n"
            f"env = {{ RECORD_FILE = {toml_string(str(record_file))} }}\n")


def policy_section(mode: str | None = None, allow=(), ask=(), deny=(), *, ceiling: bool = False) -> str:
    lines = ["[policy]"]
    if mode:
        lines.append(f"{'mode_ceiling' if ceiling else 'mode'} = {toml_string(mode)}")
    for name, rules in (("allow", allow), ("ask", ask), ("deny", deny)):
        if rules:
            lines.append(f"{name} = {toml_list(list(rules))}")
    return "\n".join(lines) + "\n"


def hook_section(event: str, match: str, command: list[str]) -> str:
    return f"[[hooks]]\nevent = {toml_string(event)}\nmatch = {toml_string(match)}\ncommand = {toml_list(command)}\n"


def write_project(directory: Path, *sections: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "toolkernel.toml"
    path.write_text("\n".join(sections), encoding="utf-8")
    return path


def recorded_calls(record_file: Path) -> list[dict[str, Any]]:
    if not record_file.exists():
        return []
    return [json.loads(line) for line in record_file.read_text(encoding="utf-8").splitlines() if line]


# The same recording sink as the kernel tests use.
CollectingSink = RecordingSink


def error_codes(stderr: str) -> list[str]:
    """The `code` of every JSON error line `tools` wrote to stderr."""
    codes = []
    for line in stderr.splitlines():
        line = line.strip()
        if line.startswith("{") and '"error"' in line:
            try:
                codes.append(json.loads(line)["error"]["code"])
            except (ValueError, KeyError, TypeError):
                continue
    return codes


# -- a real kernel -----------------------------------------------------------------


@dataclass
class Cell:
    """What a frontend saw of one executed cell."""

    status: str
    stdout: str = ""
    stderr: str = ""
    displays: list[dict[str, Any]] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def reports(self) -> list[dict[str, Any]]:
        return [d[REPORT_MIME] for d in self.displays if REPORT_MIME in d]

    @property
    def report(self) -> dict[str, Any]:
        reports = self.reports
        assert len(reports) == 1, f"expected one report, got {len(reports)}: {self}"
        return reports[0]

    @property
    def value(self) -> str:
        """The text/plain of the cell's execute_result (a `%tools` line's return value)."""
        return self.results[-1]["text/plain"] if self.results else ""


def kernel_env(workdir: Path, **extra: str) -> dict[str, str]:
    """The kernel's environment: isolated from the machine's user and admin configs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKERNEL_") or k == "TOOLKERNEL_TRUST_ALL"}
    env["XDG_CONFIG_HOME"] = str(workdir.parent / f"{workdir.name}-xdg")
    env["TOOLKERNEL_ADMIN_CONFIG"] = str(workdir.parent / f"{workdir.name}-no-admin.toml")
    env.update(extra)
    return env


def untrusting_env(workdir: Path, state: Path, **extra: str) -> dict[str, str]:
    """`kernel_env` as on a person's machine: no TOOLKERNEL_TRUST_ALL, trust records in `state`."""
    env = kernel_env(workdir, XDG_STATE_HOME=str(state))
    env.pop("TOOLKERNEL_TRUST_ALL", None)
    return {**env, **extra}


def shown(cell: "Cell") -> str:
    """All a person saw of a cell, as one text to search."""
    return cell.stdout + cell.stderr + json.dumps(cell.error) + json.dumps(cell.displays)


class Kernel:
    """A real python3 kernel started in `workdir` with toolkernel loaded."""

    def __init__(self, workdir: Path, env: dict[str, str] | None = None, *, load: bool = True) -> None:
        self.workdir = workdir
        self.manager, self.client = started_kernel(workdir, env or kernel_env(workdir))
        if load:
            cell = self.run("%load_ext toolkernel")
            assert cell.ok, cell

    def run(self, code: str, *, allow_stdin: bool = False) -> Cell:
        cell = Cell(status="")
        stdout, stderr = [], []

        def on_output(msg: dict[str, Any]) -> None:
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                (stdout if content["name"] == "stdout" else stderr).append(content["text"])
            elif kind in ("display_data", "update_display_data"):
                cell.displays.append(content["data"])
            elif kind == "execute_result":
                cell.results.append(content["data"])
            elif kind == "error":
                cell.error = {"ename": content["ename"], "evalue": content["evalue"]}

        reply = self.client.execute_interactive(code, output_hook=on_output, timeout=WAIT,
                                                allow_stdin=allow_stdin)
        cell.status = reply["content"]["status"]
        cell.stdout, cell.stderr = "".join(stdout), "".join(stderr)
        return cell

    def comm_request(self, target: str, data: dict[str, Any]) -> dict[str, Any]:
        """Open a comm to `target` from the frontend side, send `data`, return the kernel's reply."""
        comm_id = uuid.uuid4().hex
        session, shell = self.client.session, self.client.shell_channel
        shell.send(session.msg("comm_open", {"comm_id": comm_id, "target_name": target, "data": {}}))
        shell.send(session.msg("comm_msg", {"comm_id": comm_id, "data": data}))
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            try:
                msg = self.client.get_iopub_msg(timeout=1)
            except queue.Empty:
                continue
            content = msg["content"]
            if msg["msg_type"] == "comm_msg" and content.get("comm_id") == comm_id:
                return content["data"]
        raise AssertionError(f"no reply on comm {target!r} within {WAIT}s")

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


class Answering:
    """An approver that answers every question with `answer`, keeping the questions."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[ApprovalRequest] = []

    async def __call__(self, request: ApprovalRequest) -> Answer:
        self.requests.append(request)
        return self.answer
