"""A toolkernel session: what lives as long as the kernel does.

It owns the MCP server pool, the session state of tools (todos, notebook
pairing), the approvals and the registered hooks. Each shell run (and each
direct call) reads the config afresh and gets its own catalog, dispatcher
and call record.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from . import _loop
from ._approvals import ApprovalStore
from ._builtin import ToolsCommand
from ._catalog import Catalog
from ._commands import ProcessSlots, check_names, command_tool
from ._config import Config, load_config
from ._dispatch import CallEnv, Dispatcher, Run
from ._guard import ConfigGuard
from ._hooks import Hooks
from ._mcp import ServerPool
from ._notebook import notebook_tools
from ._policy import Policy
from ._preflight import preflight
from ._shell import ShellResult, Sink, execute, new_bash
from ._tool import Tool
from ._tools import own_tools


class Session:
    def __init__(self, workdir: str | Path | None = None) -> None:
        self.workdir = Path(workdir or os.getcwd()).resolve()
        self.pool = ServerPool()
        self.state: dict[str, Any] = {}
        self.hooks = Hooks()
        self.pending: list = []
        self.approvals = ApprovalStore(self.workdir)
        self.extra_tools: list[Tool] = []
        self.process_slots = ProcessSlots()  # command-tool processes at once, per kernel

    # -- per run --------------------------------------------------------------

    async def prepare(self) -> ToolsCommand:
        """Read the config and wire a fresh `tools` command. Raises ConfigError."""
        config = load_config(self.workdir)
        await self.pool.retire(set(config.servers))
        env = CallEnv(
            workdir=self.workdir,
            policy=Policy.from_config(config.policy, config.admin_policy,
                                      extra_allow=self.approvals.lasting_rules()),
            approvals=self.approvals,
            hooks=self._hooks_for(config),
            settings=config.tools,
            state=self.state,
            pending=self.pending,
        )
        tools = [*own_tools(), *notebook_tools(), *self.extra_tools]
        tools += self._command_tools(config, tools)
        catalog = Catalog(config.servers.values(), tools, self.pool)
        return ToolsCommand(catalog, Dispatcher(env), Run(), self.workdir)

    def _command_tools(self, config: Config, own: list[Tool]) -> list[Tool]:
        servers = {s.name: s.source for s in config.servers.values()}
        problems = check_names(config.commands.values(), [t.name for t in own], servers)
        if problems:
            raise problems[0]
        return [command_tool(c, self.process_slots) for c in config.commands.values()]

    def _hooks_for(self, config: Config) -> Hooks:
        self.hooks.clear_command_hooks()
        for hook in config.hooks:
            self.hooks.add_command_hook(hook["event"], hook["match"], list(hook["command"]),
                                        hook.get("timeout", 30), cwd=hook.get("cwd"))
        return self.hooks

    def run_script(self, script: str, sink: Sink, *, read_only: bool = False) -> ShellResult:
        command, stopped = _loop.run(self._prepare_and_check(script))
        if stopped is not None:
            sink.stderr(stopped.stderr)
            return stopped
        bash = new_bash(command, self.workdir, read_only=read_only)
        guard = ConfigGuard(self.workdir)
        result = execute(bash, command, script, sink, self.workdir)
        for message in guard.undo_changes():
            sink.stderr(message)
            result.stderr += message
        if command.run.needs_report(result.exit_code):
            result.report = command.run.report(result.exit_code)
        return result

    async def _prepare_and_check(self, script: str) -> tuple[ToolsCommand, ShellResult | None]:
        command = await self.prepare()
        return command, await preflight(script, command)

    def start_eager(self) -> None:
        """Start eager servers in the background; errors show up when they are used."""
        try:
            config = load_config(self.workdir)
        except Exception:  # noqa: BLE001 - a bad config is reported on the first run
            return
        eager = [s for s in config.servers.values() if s.load == "eager"]
        if eager:
            _loop.submit(self.pool.start(eager))

    def close(self) -> None:
        _loop.run(self.pool.close(), timeout=30)
