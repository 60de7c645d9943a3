"""Folding the files, lowest precedence first, into one `Config`.

A server defined again replaces the earlier definition whole (no field merging);
names fold as everywhere (`_names.fold`). Policy rule lists are concatenated and the
highest-precedence `mode` wins; the admin file's `[policy]` is kept apart
(`Config.admin_policy`) so nothing can loosen it. Hooks are concatenated. `[tools]`
settings merge key by key, the nearer file winning, except a command tool: like a
server, it replaces an earlier definition whole. `[tools_in_shell]` and `[shell]`
and `[rewind]`
merge key by key; `[sandbox]` lists join; `[serve]` merges key by key, from trusted files only.

A file with a doubt (an untrusted project folder, `_sources.Doubts`) is checked all
the same, but only what tightens is kept: its deny and ask rules and a stricter mode.
Servers and hooks start code, and allow rules, `[tools]` settings, command tools,
raised `[shell]` limits, `[sandbox]` and a looser mode loosen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from .._errors import ConfigError
from .._names import fold
from ._commands import CommandToolConfig
from ._approvals import approvals_section
from ._check import known_keys
from ._expand import EMPTY
from ._hooks import HookConfig, hooks_section
from ._limits import ShellLimits, shell_section
from ._policy import PolicySection, policy_section, stricter
from ._rewind import RewindLimits, rewind_section
from ._sandbox import SandboxSettings, sandbox_section
from ._serve import ServeSettings, serve_section
from ._servers import ServerConfig, digest, servers_section
from ._sources import Source
from ._tools import freeze, merge_settings, own_settings, tools_section
from ._tools_in_shell import ToolsInShell, tools_in_shell_section

SECTIONS = ("mcp_servers", "policy", "hooks", "tools", "tools_in_shell", "shell", "approvals", "rewind", "sandbox",
            "serve")


def _no_mapping() -> Mapping[str, Any]:
    return EMPTY


@dataclass(frozen=True)
class Config:
    servers: Mapping[str, ServerConfig]
    # Merged [policy] of user and project files; its mode is always set ("default"
    # when no file sets one).
    policy: PolicySection
    # [policy] of the admin file alone; `mode_ceiling` only when the admin set one
    # (written `mode` or `mode_ceiling` in the file).
    admin_policy: PolicySection
    hooks: tuple[HookConfig, ...]
    # [tools] settings of toolkernel's own tools, keyed by tool name with "_" for "-".
    tools: Mapping[str, Any]
    files: tuple[str, ...]
    fingerprint: str
    # One line per project folder whose config only tightened: the folder, why, the fix.
    untrusted: tuple[str, ...] = ()
    # The folders among them that a person's trust would make count (`_trust`).
    to_trust: tuple[str, ...] = ()
    # Whether the lasting approvals in the working directory's .toolkernel/ may be used.
    approvals_trusted: bool = True
    # [tools.NAME] tables with a `command` (seed 003), keyed by name with "_" for "-".
    commands: Mapping[str, CommandToolConfig] = field(default_factory=_no_mapping)
    tools_in_shell: ToolsInShell = ToolsInShell().settled()
    shell: ShellLimits = ShellLimits()
    rewind: RewindLimits = RewindLimits()
    # Servers whose own entry is wrong, by name: only they are unavailable (issue 10);
    # every other part of the config still counts.
    broken_servers: Mapping[str, ConfigError] = field(default_factory=_no_mapping)
    # Where the code a project folder's config runs was looked for: its trust covers that
    # code, so a change there reads the config again (`_cache`).
    code_paths: tuple[str, ...] = ()
    # [approvals] mid_run: "ask" (the default) or "stop" (`_approvals.py`).
    mid_run: str = "ask"
    # [sandbox]: what an agent's host processes see beyond the sandbox's defaults (trusted files').
    sandbox: SandboxSettings = SandboxSettings()
    # [serve]: whether a `serve --server` call may start a kernel session (trusted files').
    serve: ServeSettings = ServeSettings().settled()

    def server(self, name: str) -> ServerConfig | None:
        """The server called `name`, hyphens and underscores being the same."""
        wanted = fold(name)
        return next((s for n, s in self.servers.items() if fold(n) == wanted), None)

    def tool_settings(self, name: str) -> Mapping[str, Any]:
        return own_settings(self.tools, name)


class Builder:
    """Folds the files, lowest precedence first, into one `Config`."""

    def __init__(self, environ: Mapping[str, str], home: Path) -> None:
        self.environ, self.home = environ, home
        self.servers: dict[str, ServerConfig] = {}   # keyed by folded name
        self.broken: dict[str, tuple[str, ConfigError]] = {}   # folded name -> (name, its problem)
        self.policy = PolicySection()
        self.admin_policy = PolicySection()
        self.hooks: list[HookConfig] = []
        self.tools: dict[str, Any] = {}
        self.commands: dict[str, CommandToolConfig] = {}
        self.tools_in_shell = ToolsInShell()
        self.shell: dict[str, int] = {}
        self.mid_run = "ask"
        self.rewind: dict[str, object] = {}
        self.sandbox = SandboxSettings()
        self.serve = ServeSettings()
        self.files: list[str] = []
        self.strictest: str | None = None  # the strictest mode of an untrusted file

    def add(self, source: Source, data: dict[str, Any], doubt: str | None = None) -> None:
        """Fold one file in; with a `doubt`, only what tightens (checked all the same)."""
        self.files.append(str(source.path))
        trusted = doubt is None
        self._add_servers(source, data, use=trusted)
        if source.is_json:
            return
        source.attempt(known_keys, source, None, data, SECTIONS)
        policy = source.attempt(policy_section, source, data["policy"]) if "policy" in data else None
        if policy is not None:
            self._add_policy(source, policy if trusted else policy.tightening())
            if not trusted and policy.mode:
                self.strictest = stricter(policy.mode, self.strictest)
        hooks = source.attempt(hooks_section, source, data.get("hooks", []), default=())
        tools = source.attempt(tools_section, source, data.get("tools", {}), self.environ)
        # [tools_in_shell] counts from any file, as before trust existed: it hides or shows, never runs.
        visible = source.attempt(tools_in_shell_section, source, data.get("tools_in_shell", {}))
        self.tools_in_shell = self.tools_in_shell.then(visible or ToolsInShell())
        # Either value asks a person: it counts from any file, as [tools_in_shell] does.
        self.mid_run = source.attempt(approvals_section, source, data.get("approvals", {})) or self.mid_run
        shell = source.attempt(shell_section, source, data.get("shell", {}), default={})
        rewind = source.attempt(rewind_section, source, data.get("rewind", {}), default={})
        sandbox = source.attempt(sandbox_section, source, data.get("sandbox", {}))
        serve = source.attempt(serve_section, source, data.get("serve", {}))
        if trusted:  # raising a limit loosens, as [tools] settings do
            self.shell.update(shell)
            self.sandbox = self.sandbox.then(sandbox or SandboxSettings())
            self.serve = self.serve.then(serve or ServeSettings())  # starts kernels: as a server starts code
            self.rewind.update(rewind)  # recording less (an ignore glob) must not come from a clone
            # hooks and command tools run code: only from trusted config
            self.hooks.extend(hooks)
            if tools is not None:
                self.tools = merge_settings(self.tools, tools.settings)
                # A command tool defined again replaces the earlier one whole, as a server does.
                self.commands.update(tools.commands)

    def _add_servers(self, source: Source, data: dict[str, Any], *, use: bool) -> None:
        for name, server in servers_section(source, data, self.environ, self.home, build=use).items():
            # A disabled server (None) hides a farther definition of the same name too.
            self.servers.pop(name, None)
            self.broken.pop(name, None)
            if isinstance(server, ConfigError):
                self.broken[name] = (_entry_name(server.key), server)
            elif server is not None:
                self.servers[name] = server

    def _add_policy(self, source: Source, policy: PolicySection) -> None:
        if source.admin:
            self.admin_policy = self.admin_policy.then(policy)
        else:
            self.policy = self.policy.then(policy)

    def build(self, untrusted: tuple[str, ...] = (), to_trust: tuple[str, ...] = (), *,
              approvals_trusted: bool = True, code_paths: tuple[str, ...] = ()) -> Config:
        servers = {server.name: server for server in self.servers.values()}
        admin = self.admin_policy
        return Config(
            servers=MappingProxyType(servers),
            policy=PolicySection(self.policy.allow, self.policy.ask, self.policy.deny,
                                 mode=stricter(self.policy.mode or "default", self.strictest),
                                 network=self.policy.network),
            admin_policy=PolicySection(admin.allow, admin.ask, admin.deny, mode_ceiling=admin.mode),
            hooks=tuple(self.hooks),
            tools=freeze(self.tools),
            files=tuple(self.files),
            commands=MappingProxyType(dict(self.commands)),
            tools_in_shell=self.tools_in_shell.settled(),
            shell=ShellLimits(**self.shell),
            rewind=RewindLimits(**self.rewind),  # type: ignore[arg-type]
            broken_servers=MappingProxyType(dict(self.broken.values())),
            fingerprint=digest({name: s.fingerprint for name, s in servers.items()}),
            untrusted=untrusted,
            to_trust=to_trust,
            approvals_trusted=approvals_trusted,
            code_paths=code_paths,
            mid_run=self.mid_run,
            sandbox=self.sandbox,
            serve=self.serve.settled(),
        )


def _entry_name(key: str | None) -> str:
    """The server's name as written: the last part of its key (`mcp_servers.NAME...`)."""
    return (key or "").split(".", 2)[1] if key and "." in key else (key or "")
