"""A toolkernel session: what lives as long as the kernel does.

It owns the MCP server pool, the session state of tools (todos, notebook
pairing), the approvals and the registered hooks. Each shell run (and each
direct call) reads the config afresh and gets its own catalog, dispatcher
and call record.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from . import _loop
from ._approval._approvals import Approvals
from ._approval._pending import PendingStore
from ._approval._approver import Approver, StdinApprover, asking, stop_and_report
from ._command._catalog import Catalog, CatalogCache, same_items, check_names
from ._command._command import ToolsCommand
from ._providers._commands import ProcessSlots, command_tool
from ._config._config import Config
from ._config._cache import ConfigCache, StatOnce, lstat_or_none
from ._config._untrusted import not_trusted
from ._approval._dispatch import CallEnv, Dispatcher
from ._runners._guard_cache import PlanCache
from ._approval._hooks import Hooks
from ._providers._notebook import notebook_tools
from ._approval._policy import Policy
from ._runners._preflight import preflight
from ._providers._base import ToolProvider, ToolSet, broken_servers, mcp_providers
from ._approval._run import NO_EVENTS, Run, RunEvents
from ._journal import Journal
from ._saved import remove_old as remove_old_outputs
from ._runners._shell import RunControl, ScriptEvents, ScriptRunner, ShellResult, Sink, execute
from ._tool import Tool
from ._providers._tools import own_tools
from ._providers._tool_lists import ToolLists
from ._approval._protected import STATE_DIR, make_state_dir, mount_plan
from ._runners._sandbox_plan import sandbox_plan
from ._sandbox import Plan, mechanism as sandbox_mechanism

if TYPE_CHECKING:
    from ._providers._mcp import ServerPool


class Session:
    def __init__(self, workdir: str | Path | None = None) -> None:
        self.workdir = Path(workdir or os.getcwd()).resolve()
        remove_old_outputs(self.workdir)  # seed 002: saved outputs are kept 7 days
        self.config_cache = ConfigCache(self.workdir)
        self.journal = Journal(self.workdir)  # what each run changed, and the way back (issue 38)
        self.plans = PlanCache()  # the read-only mounts, worked out again when anything they depend on moved
        self.catalogs = CatalogCache()
        self.tool_lists = ToolLists(self.workdir / STATE_DIR)  # on-demand servers' tools, kept on disk
        self._kept_providers: tuple[Config, tuple[ToolProvider, ...], tuple[ToolProvider, ...]] | None = None
        self._kept_policy: tuple[Config, tuple[str, ...], bool, Policy] | None = None
        self._pool: ServerPool | None = None
        self._pool_lock = threading.Lock()
        self.state: dict[str, Any] = {}
        self.hooks = Hooks()
        self.approvals = Approvals(self.workdir)
        self._approvals_file = str(self.approvals.path)
        self._state_dir = str(self.workdir / STATE_DIR)
        self.process_slots = ProcessSlots()  # command-tool processes at once, per kernel
        # How the person this session serves trusts a folder: named in errors an untrusted config causes.
        self.trust_advice = "%tools trust"
        # The in-process sources; each run adds one provider per configured MCP server.
        self.providers: list[ToolProvider] = [ToolSet("builtin", own_tools()), ToolSet("notebook", notebook_tools())]

    @property
    def pool(self) -> ServerPool:
        """The MCP servers of this kernel; made, and the MCP SDK imported, when first needed."""
        if self._pool is None:
            # `%load_ext`'s warm-up makes it on a thread of its own while the first cell may
            # ask too: the SDK's import takes seconds, and two pools would split the servers.
            with self._pool_lock:
                if self._pool is None:
                    from ._providers._mcp import ServerPool

                    self._pool = ServerPool()
        return self._pool

    def add_provider(self, provider: ToolProvider) -> None:
        """Add a source of tools for the runs that start from now on (see `toolkernel.register_tools`)."""
        self.providers.append(provider)

    def register_tools(self, tools: list[Tool]) -> None:
        """Add Python tools as top-level commands; a name already taken raises ConfigError."""
        provider = ToolSet("builtin", tools, source="toolkernel.register_tools")
        in_process = [p for p in self.providers if isinstance(p, ToolSet) and p.name is None] + [provider]
        check_names(in_process, [p.listed for p in in_process])
        self.add_provider(provider)

    # -- per run --------------------------------------------------------------

    async def prepare(self, events: RunEvents = NO_EVENTS, approver: Approver = stop_and_report,
                      *, read_only: bool = False, one_call: bool = False, agent: bool = False,
                      route: str | None = None, about: Mapping[str, Any] | None = None) -> ToolsCommand:
        """Read the config and wire a fresh `tools` command. Raises ConfigError
        (`_protected.Unprotectable` too: what scripts must not write cannot be protected).
        `one_call` (a direct call): no script runs, so the mount plan is worked out only
        if the call names paths (the plan's check is a fifth of a direct call's cost).
        `agent`: an agent's run, whose host programs run in the OS sandbox (`_sandbox.py`).
        `route`: how the run came, as the journal of changes lists it (else worked out); `about`:
        where it came from, for a person reading that list (a notebook's cell)."""
        config, env = self._config_and_env(approver, read_only, one_call, agent)
        if self._retiring(config):
            await _loop.on_private(self.pool.retire(set(config.servers)))  # its sessions live there
        providers = self._run_providers(config)
        catalog = self.catalogs.kept(providers) or await self.catalogs.open(providers)
        return ToolsCommand(catalog, Dispatcher(env), self._new_run(config, one_call, agent, route, about),
                            self.workdir, events)

    def _new_run(self, config: Config, one_call: bool, agent: bool, route: str | None,
                 about: Mapping[str, Any] | None = None) -> Run:
        """A run's record, with its own part of the journal (`[rewind]` as the config says now)."""
        if self.journal.limits is not config.rewind:  # the first run, or [rewind] changed
            self.journal.limits = config.rewind
            self.journal.remove_old()  # kept `keep_days`, as saved outputs are kept 7 days
        route = route or ("direct" if one_call else "agent" if agent else "cell")
        # `[rewind] enabled = false` (the person's own config only): no run records anything.
        journal = self.journal.start_run(route, about) if config.rewind.enabled else None
        return Run(limit=config.shell.call_limit, journal=journal, one_call=one_call)

    def prepare_now(self, approver: Approver = stop_and_report, *, agent: bool = False) -> ToolsCommand:
        """`prepare(one_call=True)` from sync code on a thread where `_loop.run_in_place` may run
        (a direct call): the same reads and checks, and no event loop unless something must wait
        (MCP servers to retire, a catalog whose names are to be checked again). Running a loop
        for work that never waits cost a direct call a fifth of its time."""
        return self._prepared(approver, agent=agent, one_call=True, opening=_loop.run_in_place)

    def _prepared(self, approver: Approver, *, events: RunEvents = NO_EVENTS, read_only: bool = False,
                  one_call: bool = False, agent: bool = False, route: str | None = None,
                  opening: Callable[[Any], Catalog] | None = None,
                  about: Mapping[str, Any] | None = None) -> ToolsCommand:
        """`prepare` from sync code: a loop (`opening` one for the catalog, the private one for
        servers to retire) only where something must wait. A script's run made two trips to the
        private loop for work that never waits (about 0.1-0.3 ms of a 3 ms run)."""
        config, env = self._config_and_env(approver, read_only, one_call, agent)
        if self._retiring(config):
            _loop.run(self.pool.retire(set(config.servers)))
        providers = self._run_providers(config)
        catalog = self.catalogs.kept(providers) or (opening or _loop.run)(self.catalogs.open(providers))
        return ToolsCommand(catalog, Dispatcher(env), self._new_run(config, one_call, agent, route, about),
                            self.workdir, events)

    def _retiring(self, config: Config) -> bool:
        """Whether servers no longer in `config` are to be closed (a trip to the private loop,
        which cost a direct call of an own tool more than the call itself, in a session with
        servers). No MCP SDK is imported for a config without servers."""
        if not config.servers and self._pool is None:
            return False
        return self.pool.holds_other_than(set(config.servers))

    def _config_and_env(self, approver: Approver, read_only: bool, one_call: bool,
                        agent: bool = False) -> tuple[Config, CallEnv]:
        """The config as it is now, and what the run's dispatcher is to know of it."""
        # A script run's config check and mount plan share their lstats. A direct call's plan is
        # worked out only if the call names paths, so its check looks on its own: sharing cost
        # every direct call more than the few looks it would spare the rare one that plans.
        looked_at = StatOnce()
        config, checked = self.config_cache.check(lstat_or_none if one_call else looked_at)
        plan = functools.partial(self.plans.plan, self.workdir, config, lstat=looked_at)
        if one_call and not checked.is_folder(self._state_dir):
            make_state_dir(Path(self._state_dir))  # what the plan does first: private, and never a link
        env = CallEnv(
            workdir=self.workdir,
            policy=self._policy(config, read_only, checked.missing(self._approvals_file)),
            approvals=self.approvals,
            hooks=self._hooks_for(config),
            settings=config.tools,
            state=self.state,
            approver=approver,
            guarded=None if one_call else plan(),
            plan_guarded=plan if one_call else None,
            untrusted=config.untrusted,
            not_trusted=not_trusted(config.to_trust, self.workdir, self.trust_advice) if config.to_trust else "",
            shell=config.shell,
            agent=agent,
            sandbox_settings=config.sandbox,
        )
        if agent:
            env.sandbox = functools.partial(_agent_sandbox, env)
            if not self.approvals.shares_pending():
                # An agent's call that nobody here can answer now waits where a person answers
                # it from a terminal or another front end (`toolkernel approve`), outside the
                # workspace, where the agent's processes cannot write.
                self.approvals.share_pending(PendingStore(self.workdir))
        return config, env

    def _policy(self, config: Config, read_only: bool, no_approvals: bool) -> Policy:
        """The run's policy: the same (frozen) object while the config, the lasting approvals
        and `read_only` are (building it is a fifth of a direct call's cost). `no_approvals`:
        the config's check of this run found no approvals file (a miss asks more, never less)."""
        # Lasting approvals loosen the policy: only those of a trusted folder count.
        lasting = tuple(self.approvals.lasting_rules()) if config.approvals_trusted and not no_approvals else ()
        kept = self._kept_policy
        if kept is None or kept[0] is not config or kept[1] != lasting or kept[2] != read_only:
            policy = Policy.from_config(config.policy, config.admin_policy, extra_allow=lasting)
            kept = self._kept_policy = (config, lasting, read_only, dataclasses.replace(policy, read_only=read_only))
        return kept[3]

    def _run_providers(self, config: Config) -> tuple[ToolProvider, ...]:
        """The sources of a run under `config`: the same objects while neither the config nor the
        session's own providers changed, so the catalog need not check their names again."""
        kept = self._kept_providers
        if kept is None or kept[0] is not config or not same_items(kept[1], tuple(self.providers)):
            servers = mcp_providers(config.servers.values(), self.pool, self.tool_lists) if config.servers else []
            providers = (*self.providers, *self._command_tools(config), *servers,
                         *broken_servers(config.broken_servers))
            kept = self._kept_providers = (config, tuple(self.providers), providers)
        return kept[2]

    def _command_tools(self, config: Config) -> list[ToolProvider]:
        """One provider per command tool, so a name collision names its own file and key."""
        providers = []
        for cfg in config.commands.values():
            provider = ToolSet("command", [command_tool(cfg, self.process_slots)], source=cfg.source)
            provider.source = (cfg.source, cfg.key)
            providers.append(provider)
        return providers

    def _hooks_for(self, config: Config) -> Hooks:
        # In one step: a run of this session going on meanwhile keeps a whole set of hooks.
        self.hooks.set_command_hooks([(hook.event, hook.match, list(hook.command), hook.timeout, hook.cwd)
                                      for hook in config.hooks])
        return self.hooks

    def run_script(self, script: str, sink: Sink, *, read_only: bool = False,
                   runner: ScriptRunner | None = None, approver: Approver | None = None,
                   ask: Callable[[str], str] | None = None, agent: bool = False,
                   route: str | None = None, about: Mapping[str, Any] | None = None,
                   always_report: bool = False, control: RunControl | None = None,
                   description: str | None = None, events: ScriptEvents | None = None) -> ShellResult:
        """Run `script` in `runner` (Bashkit by default). Who answers a call that asks:
        `approver`, or else a person at `ask(prompt)` (such as `input`), or else nobody
        (the run stops and reports). The report lists what a person was asked mid-run;
        it is made when the run needs one, or for every run with `always_report`.
        `control`: the run as other threads hold it (stop, a time limit, its calls so far);
        `description`: its label, in its report and the questions it asks; `events`: a
        `ScriptEvents` that also watches the output as it comes."""
        from ._runners._bashkit import BashkitRunner

        runner = runner or BashkitRunner(read_only=read_only)
        events = events or ScriptEvents()
        if approver is None and ask is not None:
            # A person is at the cell: a call built at run time waits there for their answer
            # ([approvals] mid_run = "ask"). An agent's cell, or "stop", stops the script at it
            # with the report (seed 000), and the person answers on it.
            in_place = not agent and self.config_cache.load().mid_run == "ask"
            approver = StdinApprover(lambda prompt, request: events.on_pump_thread(asking, ask, prompt, request),
                                     lambda line: events.on_pump_thread(print, line), mid_run=in_place)
        if description:  # the journal's Changes list names the run by it too
            about = {**(about or {}), "description": description}
        command = self._prepared(approver or stop_and_report, events=events, read_only=read_only, agent=agent,
                                 route=route, about=about)
        command.run.description = description
        result = execute(runner, command, script, events, sink,
                         before_start=lambda: self._may_start(script, command, runner, events), control=control)
        stopped = command.run.stopped
        result.denied_by_person = (stopped is not None and stopped.before_start and stopped.approval == "denied"
                                   and getattr(approver, "tells_the_answer", False))
        result.changes = command.run.end()  # ended on the script's thread already, unless it never started
        if always_report or command.run.needs_report(result.exit_code):
            result.run_report = command.run.report(result.exit_code)
        return result

    @staticmethod
    def _may_start(script: str, command: ToolsCommand, runner: ScriptRunner, events: RunEvents) -> bool:
        """The before-start check, on the script's thread (a person may be asked). An agent's
        `%%bash` cell is itself a `Bash` call: its own check comes before its `tools` calls'."""
        refusal = getattr(runner, "refusal", None)
        error = refusal(script, command) if refusal is not None else None
        calls = runner.literal_calls(script) if error is None else []
        if calls:  # a call written out in full may ask first (on the private loop: it may wait)
            error = _loop.run(preflight(calls, command))
        if error:
            events.output("", error)
        return error is None

    def start_eager(self) -> None:
        """Start eager servers in the background; errors show up when they are used."""
        try:
            config = self.config_cache.load()
        except Exception:  # noqa: BLE001 - a bad config is reported on the first run
            return
        eager = [s for s in config.servers.values() if s.load == "eager"]
        if eager:
            _loop.submit(self.pool.start(eager))

    def warm_up(self) -> None:
        """Import what the first tool call needs (in the background at `%load_ext`): input
        checks (jsonschema) always, the MCP SDK when the config names servers, and the installed
        module names a run and a write are checked against (_shadowing.py). Nothing runs."""
        import jsonschema  # noqa: F401

        from ._shadowing import installed

        installed(str(self.workdir))  # a first run would list every folder of sys.path

        try:
            config = self.config_cache.load()
        except Exception:  # noqa: BLE001 - a bad config is reported on the first run
            return
        if config.servers:
            self.pool  # noqa: B018 - made here, and the SDK imported with it

    def close(self) -> None:
        """Close the MCP servers and the paired kernel of this session."""
        try:
            _loop.run(self._close(), timeout=30)
        finally:
            self.journal.close()

    async def _close(self) -> None:
        from ._providers._notebook import unpair

        await unpair(self.state)
        if self._pool is not None:
            await self._pool.close()


def _agent_sandbox(env: CallEnv) -> Plan | None:
    """The OS sandbox of the host programs an agent's run starts; None where there is none."""
    if not sandbox_mechanism().available:
        return None
    return sandbox_plan(env.protection() or mount_plan(env.workdir), env.sandbox_settings)
