"""`toolkernel lint` / `%tools lint`: check the config statically, starting nothing.

The findings, each with its file and key:
- every problem the config reader finds, in every file (an empty `command`,
  `parameters` that is not a JSON Schema, a broken template, a bad rule, ...);
- a command tool whose templates use a path no declared parameter fills, in a
  value or in a block's condition (`{{#if input.x}}`, `{{#each}}`, `{{#with}}`);
- a command tool whose name is taken by toolkernel's own tool or an MCP server;
- a policy rule, hook `match` or `keep_visible` entry that names no tool that exists
  or could exist. No MCP server is started: any tool of a configured server counts.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from .._config._commands import QUALIFIED_PREFIX
from .._providers._commands import check_names, undeclared_references
from .._config._config import Config, read_config
from .._config._policy import RULE_LISTS
from .._config._rules import is_bash_rule
from .._config._sources import Source
from .._errors import ConfigError, printable


@dataclass(frozen=True)
class Finding:
    file: str
    key: str | None
    problem: str

    def __str__(self) -> str:
        # The key and problem may quote the file (a tool's name, a template's path): escaped.
        where = printable(self.file) + (f": {printable(self.key)}" if self.key else "")
        return f"{where}: {printable(self.problem, keep=chr(10))}"

    @classmethod
    def of(cls, error: ConfigError) -> "Finding":
        return cls(error.path, error.key, error.problem)


def lint(workdir: Path, *, environ: Mapping[str, str] | None = None) -> list[Finding]:
    return check(workdir, environ=environ)[0]


def check(workdir: Path, *, environ: Mapping[str, str] | None = None) -> tuple[list[Finding], tuple[str, ...]]:
    """The findings, and a note for each project folder whose config a run would not use
    whole (not trusted, or writable by anyone): lint checks it all the same, as if trusted,
    so that its findings are the same before and after `toolkernel trust`."""
    config, problems = read_config(workdir, environ=environ, as_trusted=True)
    names = _Names(config)
    findings = [Finding.of(e) for e in (*problems, *config.broken_servers.values(),
                                        *check_names(config.commands.values(), names.own, names.server_files))]
    for command in config.commands.values():
        findings += [Finding(command.source, key, f"uses {{{{ {path} }}}}, which no declared parameter"
                             " fills (declare it under parameters.properties)")
                     for key, path in undeclared_references(command)]
    wrong = {(problem.path, problem.key) for problem in problems}  # reported already
    for file in config.files:
        findings += [Finding(file, key, problem) for key, problem in _name_problems(file, names)
                     if (file, key) not in wrong]
    return findings, config.untrusted


def report(findings: list[Finding], notes: tuple[str, ...] = ()) -> str:
    """What lint prints; `notes`: the folders a run does not use whole (checked all the same)."""
    said = [f"toolkernel lint: checked as if trusted, not used by a run until then: {printable(note)}"
            for note in notes]
    if not findings:
        return "".join(line + "\n" for line in said) + "toolkernel lint: no problems found\n"
    lines = [str(f) for f in findings] + said
    return "\n".join(lines) + f"\ntoolkernel lint: {len(findings)} problem(s)\n"


# -- names that rules, hooks and keep_visible may use ------------------------------------

class _Names:
    def __init__(self, config: Config) -> None:
        from .._providers._notebook import notebook_tools
        from .._providers._tools import own_tools

        self.own = [t.name for t in (*own_tools(), *notebook_tools())]
        self.server_files = {s.name: s.source for s in config.servers.values()}
        self.commands = [_fold(name) for name in config.commands]
        self.servers = [_fold(name) for name in self.server_files]
        self.bare = [_fold(name) for name in self.own] + self.commands

    def problem(self, pattern: str) -> str | None:
        """Why the tool pattern names nothing that is or could be, or None."""
        if is_bash_rule(pattern):
            return None  # an agent's %%bash commands, not a tool (the reader checked its syntax)
        words = pattern.split("(", 1)[0].split()
        if len(words) > 1 and words[0] == "tools":
            words = words[1:]
        words = [_fold(w) for w in words]
        if len(words) == 2:
            return None if _any(words[0], self.servers) else f"no MCP server is named {words[0]!r}"
        word = words[0] if words else ""
        if word.startswith("mcp_"):
            server = word.removeprefix("mcp_").removeprefix("_").split("__", 1)[0]
            return None if _any(server, self.servers) else f"no MCP server is named {server!r}"
        if word.startswith(QUALIFIED_PREFIX):
            name = word.removeprefix(QUALIFIED_PREFIX)
            return None if _any(name, self.commands) else f"no command tool is named {name!r}"
        if _any(word, self.bare):
            return None
        if _any(word, self.servers):
            return (f"names no tool; for the tools of the server {word!r} write "
                    f"\"{word} *\" or \"mcp_{word}\"")
        return "names no tool of toolkernel, no command tool and no configured MCP server"


def _fold(name: str) -> str:
    return name.replace("-", "_").lower()


def _any(pattern: str, names: list[str]) -> bool:
    # `*` is the rules' only wildcard and their words hold no `?` or `[`.
    return any(fnmatch.fnmatchcase(name, pattern) for name in names)


def _name_problems(file: str, names: _Names) -> Iterator[tuple[str, str]]:
    for key, pattern in _patterns(_read(file)):
        problem = names.problem(pattern)
        if problem:
            yield key, f"{json.dumps(pattern)}: {problem}"


def _read(file: str) -> dict[str, Any]:
    # The reader has accepted this file already (JSON holds no rules); read it the way the
    # reader does, so a file swapped for a link to a device meanwhile is not read for ever.
    if file.endswith(".json"):
        return {}
    try:
        return Source(Path(file)).read() or {}
    except ConfigError:
        return {}  # it changed since the reader took it; the next lint says what is wrong


def _patterns(data: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    # The file may have wrong shapes (reported by the reader): take only what fits.
    policy = _table(data, "policy")
    for name in RULE_LISTS:
        yield from _strings(f"policy.{name}", policy.get(name))
    hooks = data.get("hooks")
    for index, hook in enumerate(hooks if isinstance(hooks, list) else []):
        match = hook.get("match", "*") if isinstance(hook, dict) else None
        if isinstance(match, str):
            yield f"hooks[{index}].match", match
    yield from _strings("tools_in_shell.keep_visible", _table(data, "tools_in_shell").get("keep_visible"))


def _table(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = data.get(name)
    return value if isinstance(value, dict) else {}


def _strings(key: str, value: Any) -> Iterator[tuple[str, str]]:
    for index, entry in enumerate(value if isinstance(value, list) else []):
        if isinstance(entry, str):
            yield f"{key}[{index}]", entry
