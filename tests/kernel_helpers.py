"""Helpers for the core's tests: config files for the fixture servers, a recording
sink, and a real IPython kernel driven through jupyter_client.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SERVERS = Path(__file__).parent / "servers"
PYTHON = sys.executable

# Fixture servers are unannotated, so their tools would ask in default mode.
FIXTURE_ALLOW = ["mcp_images", "mcp_structured", "mcp_slow", "mcp_crash"]


def server_toml(name: str, *, module: str | None = None, script: str | None = None,
                load: str = "eager", description: str = "", extra: str = "") -> str:
    args = ["-m", module] if module else [str(SERVERS / script)]
    lines = [f"[mcp_servers.{name}]", f"command = {json.dumps(PYTHON)}", f"args = {json.dumps(args)}",
             f'load = "{load}"']
    if description:
        lines.append(f"description = {json.dumps(description)}")
    if extra:
        lines.append(extra)
    return "\n".join(lines) + "\n\n"


def github_toml(**kw: Any) -> str:
    return server_toml("github", script="demo.py", **kw)  # toolkernel.demo_server (see servers/demo.py)


def fixture_toml(name: str, **kw: Any) -> str:
    return server_toml(name, script=f"{name}.py", **kw)


def policy_toml(allow: list[str] = (), deny: list[str] = (), ask: list[str] = ()) -> str:
    return (f"[policy]\nallow = {json.dumps(list(allow))}\ndeny = {json.dumps(list(deny))}\n"
            f"ask = {json.dumps(list(ask))}\n\n")


def write_config(workdir: Path, text: str) -> Path:
    path = workdir / "toolkernel.toml"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # a kernel re-reading the config never sees half a file
    return path


def isolated_env(tmp: Path) -> dict[str, str]:
    """Environment variables that keep the user's and the admin's config files out."""
    (tmp / "xdg").mkdir(exist_ok=True)
    return {"XDG_CONFIG_HOME": str(tmp / "xdg"), "TOOLKERNEL_ADMIN_CONFIG": str(tmp / "no-admin.toml")}


def project_with(tmp: Path, monkeypatch, config: str) -> Path:
    """A project folder holding `config`, with the user's and admin's files kept out."""
    for key, value in isolated_env(tmp).items():
        monkeypatch.setenv(key, value)
    project = tmp / "project"
    project.mkdir()
    write_config(project, config)
    return project


def without_blanket_trust(tmp: Path, monkeypatch) -> None:
    """Trust as a real machine has it: none given, records and configs in private folders."""
    monkeypatch.delenv("TOOLKERNEL_TRUST_ALL", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp / "xdg"))
    monkeypatch.setenv("TOOLKERNEL_ADMIN_CONFIG", str(tmp / "no-admin.toml"))


# The seed's own example script, run unchanged by the shell and the kernel tests.
SEED_SCRIPT = """\
tools github list-pulls '{"repo":"acme/api","state":"open"}' \\
  | jq -r '.[] | select(.draft | not) | .number' \\
  | while read n; do
      tools github get-pull "repo=acme/api" "number=$n" | jq -c '{number, title, mergeable}'
    done
"""


@dataclass
class RecordingSink:
    """A `Sink` that keeps everything a run sends to the cell."""

    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)
    images: list[Path] = field(default_factory=list)
    progress_events: list[tuple] = field(default_factory=list)

    def stdout(self, text: str) -> None:
        self.out.append(text)

    def stderr(self, text: str) -> None:
        self.err.append(text)

    def image(self, path: Path) -> None:
        self.images.append(path)

    def progress(self, tool: str, progress: float, total: float | None, message: str | None) -> None:
        self.progress_events.append((tool, progress, total, message))

    @property
    def stdout_text(self) -> str:
        return "".join(self.out)

    @property
    def stderr_text(self) -> str:
        return "".join(self.err)


def error_lines(stderr: str) -> list[dict[str, Any]]:
    """The `{"error": ...}` JSON lines of a run's stderr."""
    errors = []
    for line in stderr.splitlines():
        if line.startswith('{"error"'):
            errors.append(json.loads(line)["error"])
    return errors


# -- a real kernel ---------------------------------------------------------------


@dataclass
class CellRun:
    reply: dict[str, Any]
    messages: list[dict[str, Any]]

    @property
    def status(self) -> str:
        return self.reply["content"]["status"]

    def of_type(self, *types: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["msg_type"] in types]

    def stream(self, name: str) -> str:
        return "".join(m["content"]["text"] for m in self.of_type("stream") if m["content"]["name"] == name)

    @property
    def stdout(self) -> str:
        return self.stream("stdout")

    @property
    def stderr(self) -> str:
        return self.stream("stderr")

    @property
    def error(self) -> dict[str, Any] | None:
        errors = self.of_type("error")
        return errors[0]["content"] if errors else None

    def displays(self) -> list[dict[str, Any]]:
        return [m["content"] for m in self.of_type("display_data", "update_display_data", "execute_result")]


def started_kernel(cwd: Path, env: dict[str, str], wait: float = 90):
    """(manager, client) of a python3 kernel that answered, started again once if it did not.

    jupyter_client picks a kernel's five ports as free ones in this process; a test process on
    another xdist worker can take one of them before the kernel binds it, and that kernel never
    answers (one full run in four, with five workers). A second start picks other ports."""
    from jupyter_client import KernelManager

    for attempt in (1, 2):
        manager = KernelManager(kernel_name="python3")
        manager.start_kernel(cwd=str(cwd), env=env)
        client = manager.client()
        client.start_channels()
        try:
            client.wait_for_ready(timeout=wait)
            return manager, client
        except RuntimeError:
            client.stop_channels()
            manager.shutdown_kernel(now=True)
            if attempt == 2:
                raise


class Kernel:
    """A real python3 kernel whose working directory is `cwd`."""

    def __init__(self, cwd: Path, env: dict[str, str] | None = None) -> None:
        self.manager, self.client = started_kernel(cwd, {**os.environ, **(env or {})})
        self.cwd = cwd

    def execute(self, code: str, timeout: float = 120, stop_on_error: bool = True) -> CellRun:
        messages: list[dict[str, Any]] = []
        reply = self.client.execute_interactive(code, output_hook=messages.append, timeout=timeout,
                                                stop_on_error=stop_on_error, allow_stdin=False)
        return CellRun(reply, messages)

    def execute_ok(self, code: str, timeout: float = 120) -> CellRun:
        run = self.execute(code, timeout)
        assert run.status == "ok", f"cell failed: {run.error} stdout={run.stdout!r} stderr={run.stderr!r}"
        return run

    def value(self, expression: str) -> Any:
        """The JSON value of a Python expression evaluated in the kernel."""
        run = self.execute_ok(f"import json as _j; print(_j.dumps({expression}))")
        return json.loads(run.stdout.strip().splitlines()[-1])

    def shutdown(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)

    # -- cells whose messages a test watches as they arrive ------------------------

    def start(self, code: str, stop_on_error: bool = True) -> str:
        return self.client.execute(code, stop_on_error=stop_on_error, allow_stdin=False)

    def messages_until(self, msg_id: str, predicate, timeout: float) -> list[dict[str, Any]]:
        """iopub messages of `msg_id` until `predicate(messages)` holds (or the cell is idle)."""
        import queue
        import time

        deadline = time.monotonic() + timeout
        seen: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            try:
                msg = self.client.get_iopub_msg(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            seen.append(msg)
            if predicate(seen):
                return seen
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return seen
        raise TimeoutError(f"no matching messages within {timeout} s: {[m['msg_type'] for m in seen]}")

    def reply(self, msg_id: str, timeout: float) -> dict[str, Any]:
        import queue
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                msg = self.client.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg
        raise TimeoutError(f"no reply to {msg_id} within {timeout} s")

    def finish(self, msg_id: str, timeout: float = 120) -> CellRun:
        """The rest of a started cell's messages and its reply."""
        messages = self.messages_until(msg_id, lambda seen: False, timeout)
        return CellRun(self.reply(msg_id, timeout), [m for m in messages if m["msg_type"] != "status"])


@contextlib.contextmanager
def loaded_kernel(workdir: Path):
    """A real kernel in `workdir` with toolkernel loaded from this test process's sys.path."""
    env = {**isolated_env(workdir.parent), "PYTHONPATH": os.pathsep.join(sys.path)}
    k = Kernel(workdir, env)
    try:
        k.execute_ok("%load_ext toolkernel")
        yield k
    finally:
        k.shutdown()
