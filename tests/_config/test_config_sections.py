"""The section parsers of the config package, one file's table at a time.

Each parser takes a `Source` (the file) and the raw table, returns frozen dataclasses,
and notes every problem in `source.problems` rather than stopping at the first.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from toolkernel._approval._policy import rule_matches, CallInfo
from toolkernel._config._rules import Rule
from toolkernel._config._hooks import HookConfig, hooks_section
from toolkernel._config._limits import shell_section
from toolkernel._config._policy import PolicySection, policy_section, stricter
from toolkernel._config._servers import servers_section
from toolkernel._config._sources import Source
from toolkernel._config._tools import merge_settings, own_settings, tools_section
from toolkernel._config._tools_in_shell import ToolsInShell, tools_in_shell_section
from toolkernel._errors import ConfigError

TOML = Path("/project/toolkernel.toml")


def toml(**kwargs) -> Source:
    return Source(TOML, **kwargs)


def keys(source: Source) -> list[str | None]:
    return [problem.key for problem in source.problems]


# -- [policy] -----------------------------------------------------------------------------------

def test_policy_rules_come_out_parsed_once_as_rules_the_policy_matches_with():
    source = toml()
    section = policy_section(source, {"mode": "accept_edits", "allow": ["github *"], "deny": ["tool__rg"]})
    assert section == PolicySection(allow=("github *",), deny=("tool__rg",), mode="accept-edits")
    (allow,) = section.allow
    assert isinstance(allow, Rule) and allow.parsed is not None
    call = CallInfo("mcp_github__list_pulls", "tools github list-pulls", {}, "read")
    assert rule_matches(allow, call)
    with pytest.raises(AttributeError):
        allow.parsed = None  # type: ignore[misc]
    assert source.problems == []


def test_policy_notes_every_bad_rule_and_keeps_the_good_ones():
    source = toml()
    section = policy_section(source, {"allow": ["ok", "a b c", 3], "deny": ["x("], "mode": "fast", "moed": 1})
    assert section.allow == ("ok",) and section.deny == ()
    assert keys(source) == ["policy.moed", "policy.mode", "policy.allow[1]", "policy.allow[2]", "policy.deny[0]"]


def test_policy_section_reads_as_the_table_it_came_from():
    section = PolicySection(deny=("x",), mode_ceiling="plan")
    assert dict(section) == {"mode_ceiling": "plan", "allow": (), "ask": (), "deny": ("x",)}
    assert "mode" not in section
    with pytest.raises(dataclasses.FrozenInstanceError):
        section.mode = "plan"  # type: ignore[misc]


def test_an_untrusted_policy_keeps_only_what_tightens():
    section = PolicySection(allow=("a",), ask=("b",), deny=("c",), mode="bypass-permissions")
    assert section.tightening() == PolicySection(ask=("b",), deny=("c",))
    assert stricter("bypass-permissions", "plan") == "plan" and stricter("default", None) == "default"


def test_only_the_admin_file_may_set_mode_ceiling():
    assert policy_section(toml(admin=True), {"mode_ceiling": "plan"}).mode == "plan"
    source = toml()
    policy_section(source, {"mode_ceiling": "plan"})
    assert keys(source) == ["policy.mode_ceiling"]


# -- [[hooks]] ----------------------------------------------------------------------------------

def test_hooks_own_the_event_spellings_of_the_file():
    source = toml()
    first, second = hooks_section(source, [{"event": "pre_call", "command": ["a"], "match": "github *"},
                                           {"event": "after_call", "command": ["b"], "timeout": 2}])
    assert first == HookConfig("before_call", "github *", ("a",), "/project", str(TOML))
    assert isinstance(first.match, Rule)
    assert (second.event, second.match, second.timeout) == ("after_call", "*", 2)


def test_every_bad_hook_is_noted():
    source = toml()
    hooks = hooks_section(source, [{"event": "before", "command": ["a"]}, {"event": "pre_call"},
                                   {"event": "pre_call", "command": ["ok"]}])
    assert [h.command for h in hooks] == [("ok",)]
    assert keys(source) == ["hooks[0].event", "hooks[1].command"]


# -- [mcp_servers] ------------------------------------------------------------------------------

def test_servers_expand_variables_and_remember_the_secret_values():
    source = toml()
    found = servers_section(source, {"mcp_servers": {"GitHub": {"command": "gh", "args": ["${TOKEN}"]},
                                                     "off": {"url": "http://${NOPE}/"}}},
                            {"TOKEN": "s3cr3t"}, Path("/home/u"), build=True)
    github, off = found["github"], found["off"]
    assert github.args == ("s3cr3t",) and github.secrets == ("s3cr3t",)  # masked in every message
    assert off.missing_vars == ("NOPE",)


def test_servers_are_only_checked_when_not_built_and_each_bad_one_is_noted():
    source = toml()
    found = servers_section(source, {"mcp_servers": {"a": {"command": 1}, "b": {}, "a-b": {"command": "x"},
                                                     "A_b": {"command": "y"}}},
                            {}, Path("/home/u"), build=False)
    assert found == {}
    assert keys(source) == ["mcp_servers.a.command", "mcp_servers.b", "mcp_servers.A_b"]


def test_a_disabled_mcp_json_server_is_none():
    source = Source(Path("/project/.mcp.json"))
    found = servers_section(source, {"mcpServers": {"s": {"command": "c", "disabled": True}}}, {}, Path("/"),
                            build=True)
    assert found == {"s": None} and source.problems == []


# -- [tools] ------------------------------------------------------------------------------------

def test_tools_split_into_own_settings_and_command_tools():
    source = toml()
    section = tools_section(source, {"web-fetch": {"allow_hosts": ["h"]},
                                     "rg": {"command": ["rg", "{{ input.p }}"], "read_only": True}}, {})
    assert section.settings == {"web_fetch": {"allow_hosts": ["h"]}}
    assert section.commands["rg"].command == ("rg", "{{ input.p }}") and section.commands["rg"].read_only


def test_every_bad_command_tool_template_is_noted():
    source = toml()
    section = tools_section(source, {"t": {"command": ["{{#if x}}", "ok", "{{/each}}"]},
                                     "u": {"command": []}}, {})
    assert keys(source) == ["tools.t.command[0]", "tools.t.command[2]", "tools.u.command"]
    assert "u" not in section.commands


def test_each_own_tool_receives_only_its_own_table():
    merged = merge_settings({"web_fetch": {"allow_hosts": ["a"], "timeout": 5}},
                            {"web_fetch": {"allow_hosts": ["b"]}, "grep_search": {"engine": "builtin"}})
    assert own_settings(merged, "web-fetch") == {"allow_hosts": ["b"], "timeout": 5}
    assert own_settings(merged, "grep_search") == {"engine": "builtin"}
    assert own_settings(merged, "read_file") == {}


# -- [tools_in_shell] and [shell] ---------------------------------------------------------------

def test_tools_in_shell_merges_key_by_key_and_settles_to_the_defaults():
    far = tools_in_shell_section(toml(), {"enabled": False, "keep_visible": ["web_fetch"]})
    near = tools_in_shell_section(toml(), {"keep_visible": ["read_file"]})
    assert far.then(near) == ToolsInShell(False, ("read_file",))
    assert ToolsInShell().settled() == ToolsInShell(True, ())
    source = toml()
    tools_in_shell_section(source, {"enabled": "yes", "keep_visible": ["a b c"], "other": 1})
    assert keys(source) == ["tools_in_shell.other", "tools_in_shell.enabled", "tools_in_shell.keep_visible[0]"]


def test_shell_limits_note_every_bad_value():
    source = toml()
    limits = shell_section(source, {"timeout": 0, "max_commands": 5, "call_limit": True, "loops": 3})
    assert limits == {"max_commands": 5}
    assert keys(source) == ["shell.loops", "shell.timeout", "shell.call_limit"]


def test_a_problem_is_a_config_error_naming_file_and_key():
    source = toml()
    shell_section(source, {"timeout": -1})
    (problem,) = source.problems
    assert isinstance(problem, ConfigError) and str(problem).startswith(f"{TOML}: shell.timeout: ")


# -- [sandbox] ----------------------------------------------------------------------------------

def test_sandbox_lists_note_every_bad_entry_and_join_across_files():
    from toolkernel._config._sandbox import SandboxSettings, sandbox_section

    source = toml()
    section = sandbox_section(source, {"env": ["HF_TOKEN", "CONDA_*", "A B"], "home": [".cache/pip", "/etc", "../x"],
                                       "domains": ["pypi.org", "*.example.org:8443", "http://x", "a:99999"],
                                       "homes": []})
    assert keys(source) == ["sandbox.homes", "sandbox.env[2]", "sandbox.home[1]", "sandbox.home[2]",
                            "sandbox.domains[2]", "sandbox.domains[3]"]
    assert section.env[:2] == ("HF_TOKEN", "CONDA_*") and section.domains[:2] == ("pypi.org", "*.example.org:8443")
    joined = SandboxSettings(env=("A",)).then(SandboxSettings(env=("A", "B"), home=(".x",)))
    assert joined == SandboxSettings(env=("A", "B"), home=(".x",))
