"""Configuration: which MCP servers exist, the policy, the hooks, tool settings.

Read afresh at the start of every shell run (a handful of small reads), from these
files, lowest precedence first:

1. the admin file: `$TOOLKERNEL_ADMIN_CONFIG`, default `/etc/toolkernel/toolkernel.toml`.
   Its `[policy]` is kept apart in `Config.admin_policy` so nothing can loosen it;
   its other sections count like any other file's.
2. the user file: `$XDG_CONFIG_HOME/toolkernel/toolkernel.toml` (default `~/.config/...`).
3. project files, found walking up from the working directory: in each directory
   `.mcp.json` and then `toolkernel.toml`; a nearer directory wins over a farther one,
   and `toolkernel.toml` wins over `.mcp.json` in the same directory.

A server defined again replaces the earlier definition whole (no field merging);
server names compare hyphen/underscore-insensitively, like the `tools` command does.
Policy rule lists are concatenated and the highest-precedence `mode` wins. Hooks are
concatenated. `[tools]` tables are merged key by key, the higher file winning, except
a table with a `command` (a command tool, `_commands.py`): like a server, it replaces an
earlier definition whole.

The upward walk stops at the home directory when the working directory is inside it
(a `~/.config` is never mistaken for a project) and at the filesystem root otherwise.

Project files count whole only when their folder is trusted (see `_trust`) and nobody
but its owners may write them. Otherwise only what tightens is kept, their deny and
ask rules and a stricter mode, and `Config.untrusted` says which folder and why:
servers and hooks start code, and allow rules, `[tools]` settings and a looser mode
loosen. A config file that exists but cannot be read (a dangling symlink, no
permission) is an error, never taken as absent.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import stat
import tomllib
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Iterator, Literal, Mapping
from urllib.parse import urlsplit

from .._providers import _commands
from .._errors import ConfigError
from ._limits import SHELL_KEYS, ShellLimits
from .._names import SERVER_NAME, SERVER_NAME_RULE, fold
from .._approval._policy import MODES, parse_rule
from ._trust import TrustStore, how_to_trust

CONFIG_NAME = "toolkernel.toml"
MCP_JSON_NAME = ".mcp.json"
DEFAULT_ADMIN_PATH = Path("/etc/toolkernel") / CONFIG_NAME
ADMIN_PATH_VARIABLE = "TOOLKERNEL_ADMIN_CONFIG"

LOAD_MODES = ("eager", "on-demand")
POLICY_MODES = ("default", "accept-edits", "plan", "bypass-permissions")
# The spelling in files (either) and the event names of `_hooks` they become.
HOOK_EVENTS = {"pre_call": "before_call", "before_call": "before_call",
               "post_call": "after_call", "after_call": "after_call"}
RULE_LISTS = ("allow", "ask", "deny")

_SECTIONS = ("mcp_servers", "policy", "hooks", "tools", "tools_in_shell", "shell")
# [tools_in_shell] (seed 000, issue 14): read and checked now; `toolkernel serve` will use it.
_TOOLS_IN_SHELL_KEYS = ("enabled", "keep_visible")
_SERVER_KEYS = ("command", "args", "env", "cwd", "url", "headers", "load", "description",
                "trust_annotations", "timeout")
# Seconds one MCP tool call may run without a word from the server (its progress
# notifications restart the clock).
DEFAULT_CALL_TIMEOUT = 300.0
_HOOK_KEYS = ("event", "match", "command", "timeout")
_STDIO_ONLY_KEYS = ("args", "env", "cwd")
_HTTP_ONLY_KEYS = ("headers",)
# `type` values seen in .mcp.json files of Claude Code, Cursor, VS Code and Cline.
_MCP_JSON_TYPES = {"stdio": "stdio", "http": "http", "streamable-http": "http",
                   "streamableHttp": "http", "sse": "sse"}
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# tomllib ends its messages with "(at line N, column M)" or "(at end of document)".
_TOML_WHERE = re.compile(r"(.*?)\s*\(at (?:line (\d+), column (\d+)|end of document)\)", re.S)
_EMPTY: Mapping[str, str] = MappingProxyType({})


def _no_mapping() -> Mapping[str, str]:
    return _EMPTY


@dataclass(frozen=True)
class ServerConfig:
    """One MCP server, with `${VAR}`s already expanded.

    Two configs compare equal (and share a `fingerprint`) when they would start the
    same server the same way, whichever file defined them.
    """

    name: str
    transport: Literal["stdio", "http", "sse"]
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=_no_mapping)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=_no_mapping)
    load: Literal["eager", "on-demand"] = "eager"
    description: str = ""
    trust_annotations: bool = True
    timeout: float = DEFAULT_CALL_TIMEOUT
    # ${VAR}s that were unset: the server cannot be used until they are (connection_required).
    missing_vars: tuple[str, ...] = ()
    source: str = field(default="", compare=False)
    # The values `${VAR}`s expanded to in command, args and url: masked in every
    # message, as env and header values are.
    secrets: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @cached_property
    def fingerprint(self) -> str:
        return _digest({f.name: _plain(getattr(self, f.name)) for f in fields(self) if f.compare})

    def __hash__(self) -> int:
        return hash(self.fingerprint)


@dataclass(frozen=True)
class Config:
    servers: Mapping[str, ServerConfig]
    # Merged [policy] of user and project files: "mode" (always present, "default" when
    # no file sets it) and "allow"/"ask"/"deny" tuples (lowest-precedence file first).
    policy: Mapping[str, Any]
    # [policy] of the admin file alone: "allow"/"ask"/"deny" tuples, and "mode_ceiling"
    # only when the admin set one (written `mode` or `mode_ceiling` in the file).
    admin_policy: Mapping[str, Any]
    # [[hooks]]: {"event": "before_call"|"after_call", "match": rule pattern,
    # "command": tuple, "cwd": folder of the file, "source": file, "timeout"?}
    hooks: tuple[Mapping[str, Any], ...]
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
    commands: Mapping[str, "_commands.CommandToolConfig"] = field(default_factory=_no_mapping)
    # [tools_in_shell]: "enabled" and "keep_visible" when a file sets them, the higher file winning.
    tools_in_shell: Mapping[str, Any] = field(default_factory=_no_mapping)
    # [shell]: the sandbox's limits (`_limits`).
    shell: ShellLimits = ShellLimits()
    # Servers whose own entry is wrong, by name: only they are unavailable (issue 10);
    # every other part of the config still counts.
    broken_servers: Mapping[str, ConfigError] = field(default_factory=_no_mapping)

    def server(self, name: str) -> ServerConfig | None:
        """The server called `name`, hyphens and underscores being the same."""
        wanted = fold(name)
        return next((s for n, s in self.servers.items() if fold(n) == wanted), None)

    def tool_settings(self, name: str) -> Mapping[str, Any]:
        settings = self.tools.get(name.replace("-", "_"), _EMPTY)
        return settings if isinstance(settings, Mapping) else _EMPTY


def load_config(workdir: Path, *, user_config_dir: Path | None = None,
                admin_path: Path | None = None,
                environ: Mapping[str, str] | None = None) -> Config:
    """Read every config file that applies to `workdir`; `ConfigError` if one is wrong.

    `user_config_dir` is the folder holding the user's `toolkernel.toml` (default
    `$XDG_CONFIG_HOME/toolkernel`); `environ` is where `${VAR}`, `HOME` and the config
    locations are looked up (default `os.environ`).
    """
    environ = os.environ if environ is None else environ
    home = _home(environ)
    builder = _Builder(environ, home)
    admin = _Source(admin_path or _admin_path(environ), admin=True)
    user = _Source((user_config_dir or _user_config_dir(environ, home)) / CONFIG_NAME)
    doubts = _Doubts(TrustStore(environ=environ))
    for source in _unique([admin, user, *_project_sources(Path(workdir), home)]):
        data = source.read()
        if data is not None:
            builder.add(source, data, doubts.about(source))
    return builder.build(doubts.notes(), doubts.to_trust(),
                         approvals_trusted=not doubts.of(Path(workdir).resolve()))


class _Doubts:
    """Why a project folder's config may only tighten: untrusted, or writable by anyone."""

    def __init__(self, store: TrustStore) -> None:
        self.store = store
        self.found: dict[Path, str] = {}

    def of(self, folder: Path) -> str | None:
        if _world_writable(folder):
            return "anyone may write to the folder, so its config is not trusted; remove write access for others (chmod o-w)"
        if not self.store.is_trusted(folder):
            return f"its config is not trusted yet (or changed since); trust it with {how_to_trust(folder)}"
        return None

    def about(self, source: "_Source") -> str | None:
        if not source.project:
            return None
        folder = source.path.parent
        doubt = self.of(folder) or _writable_file(source.path)
        if doubt:
            self.found.setdefault(folder, doubt)
        return doubt

    def notes(self) -> tuple[str, ...]:
        return tuple(f"{folder}: {doubt}" for folder, doubt in self.found.items())

    def to_trust(self) -> tuple[str, ...]:
        return tuple(str(folder) for folder, doubt in self.found.items() if "toolkernel trust" in doubt)


# --- where the files are -------------------------------------------------------------

def _home(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("HOME") or Path.home())


def _admin_path(environ: Mapping[str, str]) -> Path:
    return Path(environ.get(ADMIN_PATH_VARIABLE) or DEFAULT_ADMIN_PATH)


def _user_config_dir(environ: Mapping[str, str], home: Path) -> Path:
    return Path(environ.get("XDG_CONFIG_HOME") or home / ".config") / "toolkernel"


def _project_sources(workdir: Path, home: Path) -> Iterator["_Source"]:
    for directory in reversed(_project_dirs(workdir.resolve(), home.resolve())):
        yield _Source(directory / MCP_JSON_NAME, project=True)
        yield _Source(directory / CONFIG_NAME, project=True)


def _project_dirs(start: Path, home: Path) -> list[Path]:
    """`start` and its parents, nearest first, up to home or the root."""
    dirs = [start, *start.parents]
    if home in dirs:
        dirs = dirs[: dirs.index(home) + 1]
    return dirs


def _unique(sources: Iterable["_Source"]) -> Iterator["_Source"]:
    seen: set[Path] = set()
    for source in sources:
        key = source.path.absolute()
        if key not in seen:
            seen.add(key)
            yield source


def _world_writable(path: Path) -> bool:
    try:
        return bool(path.stat().st_mode & stat.S_IWOTH)
    except OSError:
        return True


def _writable_file(path: Path) -> str | None:
    if _world_writable(path):
        return f"anyone may write to {path.name}, so it is not trusted; remove write access for others (chmod o-w)"
    return None


# --- reading one file ----------------------------------------------------------------

@dataclass(frozen=True)
class _Source:
    path: Path
    admin: bool = False
    project: bool = False

    @property
    def is_json(self) -> bool:
        return self.path.name.endswith(".json")

    def error(self, key: str | None, problem: str) -> ConfigError:
        return ConfigError(str(self.path), key, problem)

    def read(self) -> dict[str, Any] | None:
        """The file's data; None only when nothing is there at all.

        A name that exists but leads nowhere (a dangling symlink, a path through
        a file) is an error: taking it as absent would drop its deny rules."""
        try:
            raw = self.path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            if os.path.lexists(self.path):
                raise self.error(None, "is a symlink to nothing; fix or remove it") from None
            return None
        except IsADirectoryError:
            raise self.error(None, "is a directory, expected a file") from None
        except OSError as exc:
            raise self.error(None, f"cannot read the file ({exc.strerror})") from exc
        return self._parse(self._decode(raw))

    def _decode(self, raw: bytes) -> str:
        try:
            return raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise self.error(None, f"not UTF-8 text (bad byte at offset {exc.start})") from exc

    def _parse(self, text: str) -> dict[str, Any]:
        return self._parse_json(text) if self.is_json else self._parse_toml(text)

    def _parse_toml(self, text: str) -> dict[str, Any]:
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise self.error(None, _toml_problem(str(exc), text)) from exc

    def _parse_json(self, text: str) -> dict[str, Any]:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            problem = f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
            raise self.error(None, problem) from exc
        return _table(self, None, data)


def _toml_problem(message: str, text: str) -> str:
    parsed = _TOML_WHERE.fullmatch(message)
    if not parsed:
        return f"invalid TOML: {message}"
    reason, line, column = parsed.groups()
    where = (f"line {line}, column {column}" if line
             else f"the end of the file (line {text.count(chr(10)) + 1})")
    return f"invalid TOML at {where}: {reason}"


# --- checking values -----------------------------------------------------------------

def _join(prefix: str | None, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _type_name(source: _Source, value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    names = {str: "a string", int: "an integer", float: "a float", list: "an array",
             dict: "an object" if source.is_json else "a table", type(None): "null"}
    return names.get(type(value), "a date/time")


def _expect(source: _Source, key: str | None, value: Any, kind: type, what: str) -> Any:
    # bool is an int in Python, never in a config file
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise source.error(key, f"expected {what}, got {_type_name(source, value)}")
    return value


def _table(source: _Source, key: str | None, value: Any) -> dict[str, Any]:
    return _expect(source, key, value, dict, "an object" if source.is_json else "a table")


def _string(source: _Source, key: str, value: Any, *, empty_ok: bool = True) -> str:
    _expect(source, key, value, str, "a string")
    if not value and not empty_ok:
        raise source.error(key, "must not be empty")
    return value


def _boolean(source: _Source, key: str, value: Any) -> bool:
    return _expect(source, key, value, bool, "true or false")


def _string_list(source: _Source, key: str, value: Any, *, empty_ok: bool = True) -> tuple[str, ...]:
    _expect(source, key, value, list, "an array of strings")
    for index, item in enumerate(value):
        _string(source, f"{key}[{index}]", item, empty_ok=False)
    if not value and not empty_ok:
        raise source.error(key, "must not be empty")
    return tuple(value)


def _string_table(source: _Source, key: str, value: Any) -> dict[str, str]:
    table = _table(source, key, value)
    for name, item in table.items():
        _string(source, _join(key, name), item)
    return dict(table)


def _choice(source: _Source, key: str, value: Any, allowed: tuple[str, ...]) -> str:
    if isinstance(value, str) and value in allowed:
        return value
    quoted = [json.dumps(a) for a in allowed]
    wanted = " or ".join(quoted) if len(quoted) <= 2 else "one of " + ", ".join(quoted)
    got = json.dumps(value) if isinstance(value, str) else _type_name(source, value)
    raise source.error(key, f"expected {wanted}, got {got}")


def _known_keys(source: _Source, prefix: str | None, table: Mapping[str, Any],
                allowed: tuple[str, ...]) -> None:
    for key in table:
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f' (did you mean "{close[0]}"?)' if close else ""
            raise source.error(_join(prefix, key),
                               f"unknown key{hint}; allowed here: {', '.join(allowed)}")


# --- servers -------------------------------------------------------------------------

def _server_name(source: _Source, prefix: str, name: str) -> str:
    if not SERVER_NAME.fullmatch(name):
        raise source.error(_join(prefix, name), SERVER_NAME_RULE)
    return name


def _toml_server(source: _Source, key: str, raw: Any) -> dict[str, Any]:
    table = _table(source, key, raw)
    _known_keys(source, key, table, _SERVER_KEYS)
    spec = _transport(source, key, table, declared=None)
    spec["load"] = _choice(source, f"{key}.load", table.get("load", "eager"), LOAD_MODES)
    spec["description"] = _string(source, f"{key}.description", table.get("description", ""))
    spec["trust_annotations"] = _boolean(source, f"{key}.trust_annotations",
                                         table.get("trust_annotations", True))
    if "timeout" in table:
        spec["timeout"] = _positive_number(source, f"{key}.timeout", table["timeout"])
    return spec


def _mcp_json_server(source: _Source, key: str, raw: Any) -> dict[str, Any] | None:
    """A server of the Claude Code / Cursor / VS Code format.

    Keys other tools add (autoApprove, timeout, ...) are ignored so the same file keeps
    working everywhere; `"disabled": true` (Cline) leaves the server out.
    """
    table = _table(source, key, raw)
    if _boolean(source, f"{key}.disabled", table.get("disabled", False)):
        return None
    declared = None
    if "type" in table:
        declared = _MCP_JSON_TYPES[_choice(source, f"{key}.type", table["type"],
                                           tuple(_MCP_JSON_TYPES))]
    spec = _transport(source, key, table, declared=declared)
    spec["description"] = _string(source, f"{key}.description", table.get("description", ""))
    return spec


def _transport(source: _Source, key: str, table: Mapping[str, Any],
               declared: str | None) -> dict[str, Any]:
    transport = _transport_kind(source, key, table, declared)
    stdio = transport == "stdio"
    for wrong in (_HTTP_ONLY_KEYS if stdio else _STDIO_ONLY_KEYS):
        if wrong in table:
            kind = 'HTTP servers ("url")' if stdio else 'stdio servers ("command")'
            raise source.error(f"{key}.{wrong}", f"applies only to {kind}")
    if stdio:
        return {"transport": transport,
                "command": _string(source, f"{key}.command", table["command"], empty_ok=False),
                "args": _string_list(source, f"{key}.args", table.get("args", [])),
                "env": _string_table(source, f"{key}.env", table.get("env", {})),
                "cwd": _string(source, f"{key}.cwd", table["cwd"], empty_ok=False)
                if "cwd" in table else None}
    return {"transport": transport,
            "url": _string(source, f"{key}.url", table["url"], empty_ok=False),
            "headers": _string_table(source, f"{key}.headers", table.get("headers", {}))}


def _transport_kind(source: _Source, key: str, table: Mapping[str, Any],
                    declared: str | None) -> str:
    has_command, has_url = "command" in table, "url" in table
    if has_command and has_url:
        raise source.error(key, 'has both "command" and "url"; a server is either stdio '
                           '("command") or HTTP ("url")')
    if not (has_command or has_url):
        raise source.error(key, 'needs "command" (a stdio server) or "url" (an HTTP server)')
    if declared == "stdio" and has_url:
        raise source.error(f"{key}.type", 'is "stdio" but the server has a "url"')
    if declared in ("http", "sse") and has_command:
        raise source.error(f"{key}.type", f'is "{declared}" but the server has a "command"')
    return "stdio" if has_command else (declared or "http")


class _Expander:
    """Expands `${VAR}` and `${VAR:-default}`; remembers the variables that were unset."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.missing: list[str] = []
        self.values: list[str] = []  # what came from the environment: may be secret

    def __call__(self, text: str) -> str:
        return _VARIABLE.sub(self._value, text)

    def _value(self, match: re.Match[str]) -> str:
        name, default = match[1], match[2]
        value = self.environ.get(name)
        if default is not None and not value:
            return default
        if value is None:
            if name not in self.missing:
                self.missing.append(name)
            return ""
        self.values.append(value)
        return value

    def each(self, values: Iterable[str]) -> tuple[str, ...]:
        return tuple(self(v) for v in values)

    def table(self, table: Mapping[str, str]) -> Mapping[str, str]:
        return MappingProxyType({k: self(v) for k, v in table.items()}) if table else _EMPTY


def _server(source: _Source, key: str, name: str, spec: dict[str, Any],
            environ: Mapping[str, str], home: Path) -> ServerConfig:
    expand = _Expander(environ)
    command = expand(spec["command"]) if spec.get("command") else None
    args = expand.each(spec.get("args", ()))
    env = expand.table(spec.get("env", {}))
    cwd = _resolve_cwd(expand(spec["cwd"]), source.path.parent, home) if spec.get("cwd") else None
    url = expand(spec["url"]) if spec.get("url") else None
    headers = expand.table(spec.get("headers", {}))
    if url is not None and not expand.missing:
        _check_url(source, f"{key}.url", url)
    return ServerConfig(
        name=name, transport=spec["transport"], command=command, args=args, env=env, cwd=cwd,
        url=url, headers=headers, load=spec.get("load", "eager"),
        description=spec["description"], trust_annotations=spec.get("trust_annotations", True),
        timeout=spec.get("timeout", DEFAULT_CALL_TIMEOUT), missing_vars=tuple(expand.missing),
        source=str(source.path), secrets=tuple(expand.values))


def _resolve_cwd(cwd: str, base: Path, home: Path) -> str:
    """A relative cwd is relative to the file that names it, not to the kernel."""
    if cwd == "~" or cwd.startswith("~/"):
        cwd = str(home) + cwd[1:]
    return str(base / cwd)


def _check_url(source: _Source, key: str, url: str) -> None:
    # The URL may carry a token once expanded, so it is never echoed.
    try:
        parts = urlsplit(url)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # e.g. an unclosed [IPv6 address
        valid = False
    if not valid:
        raise source.error(key, "expected an http:// or https:// URL")


# --- sections and merging ------------------------------------------------------------

def _policy(source: _Source, raw: Any) -> dict[str, Any]:
    table = _table(source, "policy", raw)
    modes = ("mode", "mode_ceiling") if source.admin else ("mode",)
    _known_keys(source, "policy", table, (*modes, *RULE_LISTS))
    if len(set(modes) & set(table)) > 1:
        raise source.error("policy.mode_ceiling", 'set "mode" or "mode_ceiling", not both')
    policy: dict[str, Any] = {}
    for name in modes:
        if name in table:
            policy["mode"] = _mode(source, f"policy.{name}", table[name])
    for name in RULE_LISTS:
        policy[name] = _rules(source, f"policy.{name}", table.get(name, []))
    return policy


def _mode(source: _Source, key: str, value: Any) -> str:
    # accept_edits is accept-edits, as everywhere else in toolkernel
    spelled = value.replace("_", "-") if isinstance(value, str) else value
    if spelled in POLICY_MODES:
        return spelled
    return _choice(source, key, value, POLICY_MODES)


def _rules(source: _Source, key: str, value: Any) -> tuple[str, ...]:
    rules = _string_list(source, key, value)
    for index, rule in enumerate(rules):
        _rule(source, f"{key}[{index}]", rule)
    return rules


def _rule(source: _Source, key: str, rule: str) -> str:
    try:
        parse_rule(rule)
    except ValueError as exc:
        raise source.error(key, str(exc)) from None
    return rule


def _hooks(source: _Source, raw: Any) -> list[Mapping[str, Any]]:
    _expect(source, "hooks", raw, list, "an array of tables ([[hooks]])")
    return [_hook(source, f"hooks[{index}]", entry) for index, entry in enumerate(raw)]


def _hook(source: _Source, key: str, raw: Any) -> Mapping[str, Any]:
    table = _table(source, key, raw)
    _known_keys(source, key, table, _HOOK_KEYS)
    for required in ("event", "command"):
        if required not in table:
            raise source.error(f"{key}.{required}", 'missing; a hook needs "event" and "command"')
    event = _choice(source, f"{key}.event", table["event"], tuple(HOOK_EVENTS))
    match = _string(source, f"{key}.match", table.get("match", "*"))
    hook: dict[str, Any] = {
        "event": HOOK_EVENTS[event],
        "match": _rule(source, f"{key}.match", match),
        "command": _string_list(source, f"{key}.command", table["command"], empty_ok=False),
        "cwd": str(source.path.parent),
        "source": str(source.path),
    }
    if "timeout" in table:
        hook["timeout"] = _positive_number(source, f"{key}.timeout", table["timeout"])
    return MappingProxyType(hook)


def _positive_number(source: _Source, key: str, value: Any) -> float:
    _expect(source, key, value, (int, float), "a number of seconds")
    if not value > 0:
        raise source.error(key, "expected a number of seconds greater than 0")
    return value


def _tools(source: _Source, raw: Any) -> dict[str, Any]:
    # Tool names are written either way ([tools.web-fetch] or [tools.web_fetch]).
    return {name.replace("-", "_"): value for name, value in _table(source, "tools", raw).items()}


# -- command tools (seed 003; the tools themselves are in _commands) -------------------

_COMMAND_TOOL_KEYS = ("command", "description", "parameters", "timeout", "env", "cwd",
                      "read_only")


def _command_tool(source: _Source, name: str, raw: dict[str, Any],
                  environ: Mapping[str, str]) -> "_commands.CommandToolConfig":
    key = f"tools.{name}"
    if not SERVER_NAME.fullmatch(name):  # the same words as a server: `tool__<name>` reads one way
        raise source.error(key, SERVER_NAME_RULE.replace("a server name", "a command tool name"))
    _known_keys(source, key, raw, _COMMAND_TOOL_KEYS)
    command = _string_list(source, f"{key}.command", raw["command"], empty_ok=False)
    for index, template in enumerate(command):
        if problem := _commands.template_problem(template):
            raise source.error(f"{key}.command[{index}]", problem)
    parameters = _commands.plain_json(raw.get("parameters", _commands.NO_PARAMETERS))
    if problem := _commands.schema_problem(parameters):
        raise source.error(f"{key}.parameters", problem)
    expand = _Expander(environ)
    env = (expand.table(_string_table(source, f"{key}.env", raw["env"]))
           if "env" in raw else None)
    cwd = expand(_string(source, f"{key}.cwd", raw["cwd"], empty_ok=False)) if "cwd" in raw else None
    return _commands.CommandToolConfig(
        name=name, command=command, parameters=parameters, env=env, cwd=cwd,
        description=_string(source, f"{key}.description", raw.get("description", "")),
        timeout=_positive_number(source, f"{key}.timeout",
                                 raw.get("timeout", _commands.DEFAULT_TIMEOUT)),
        read_only=_boolean(source, f"{key}.read_only", raw.get("read_only", False)),
        missing_vars=tuple(expand.missing), source=str(source.path))


def _tools_in_shell(source: _Source, raw: Any) -> dict[str, Any]:
    table = _table(source, "tools_in_shell", raw)
    _known_keys(source, "tools_in_shell", table, _TOOLS_IN_SHELL_KEYS)
    section: dict[str, Any] = {}
    if "enabled" in table:
        section["enabled"] = _boolean(source, "tools_in_shell.enabled", table["enabled"])
    if "keep_visible" in table:
        section["keep_visible"] = _rules(source, "tools_in_shell.keep_visible", table["keep_visible"])
    return section


def _shell(source: _Source, raw: Any) -> dict[str, int]:
    table = _table(source, "shell", raw)
    _known_keys(source, "shell", table, tuple(SHELL_KEYS))
    for key, value in table.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise source.error(f"shell.{key}", f"expected a whole number greater than 0 ({SHELL_KEYS[key]})")
    return table


def _merge_tables(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge_tables(merged[key], value)
        else:
            merged[key] = value
    return merged


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def _plain(value: Any) -> Any:
    # concrete types: an isinstance check against typing.Mapping costs more than the hash
    if isinstance(value, (dict, MappingProxyType)):
        return dict(value)  # the mappings held here are flat str -> str
    return value


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class _Builder:
    """Folds the files, lowest precedence first, into one `Config`."""

    def __init__(self, environ: Mapping[str, str], home: Path) -> None:
        self.environ, self.home = environ, home
        self.servers: dict[str, ServerConfig] = {}   # keyed by canonical name
        self.broken: dict[str, tuple[str, ConfigError]] = {}   # canonical name -> (name, error)
        self.policy: dict[str, Any] = {name: () for name in RULE_LISTS}
        self.admin_policy: dict[str, Any] = {name: () for name in RULE_LISTS}
        self.hooks: list[Mapping[str, Any]] = []
        self.tools: dict[str, Any] = {}
        self.commands: dict[str, _commands.CommandToolConfig] = {}
        self.tools_in_shell: dict[str, Any] = {}
        self.shell: dict[str, int] = {}
        self.files: list[str] = []
        self.strictest: str | None = None  # the strictest mode of an untrusted file

    def add(self, source: _Source, data: dict[str, Any], doubt: str | None = None) -> None:
        """Fold one file in; with a `doubt`, only what tightens (checked all the same)."""
        self.files.append(str(source.path))
        if source.is_json:
            self._add_servers(source, "mcpServers", data.get("mcpServers", {}), _mcp_json_server,
                              use=doubt is None)
            return
        _known_keys(source, None, data, _SECTIONS)
        self._add_servers(source, "mcp_servers", data.get("mcp_servers", {}), _toml_server,
                          use=doubt is None)
        if "policy" in data:
            policy = _policy(source, data["policy"])
            self._add_policy(source, _tightening(policy) if doubt else policy)
        hooks, tools = _hooks(source, data.get("hooks", [])), _tools(source, data.get("tools", {}))
        commands = {name: _command_tool(source, name, tools.pop(name), self.environ)
                    for name in [n for n, t in tools.items() if isinstance(t, dict) and "command" in t]}
        self.tools_in_shell.update(_tools_in_shell(source, data.get("tools_in_shell", {})))
        shell = _shell(source, data.get("shell", {}))
        if doubt is None:  # raising a limit loosens, as [tools] settings do
            self.shell.update(shell)  # hooks and command tools run code: only from trusted config
            self.hooks.extend(hooks)
            self.tools = _merge_tables(self.tools, tools)
            # A command tool defined again replaces the earlier one whole, as a server does.
            self.commands.update(commands)

    def _add_servers(self, source: _Source, prefix: str, raw: Any, parse, *, use: bool) -> None:
        found: dict[str, str] = {}
        for name, entry in _table(source, prefix, raw).items():
            key = _join(prefix, _server_name(source, prefix, name))
            canonical = fold(name)
            if canonical in found:
                raise source.error(key, f'is the same name as "{found[canonical]}" '
                                   "(case does not matter, and hyphens and underscores are interchangeable)")
            found[canonical] = name
            server: ServerConfig | ConfigError | None
            try:
                spec = parse(source, key, entry)
                server = None if spec is None else _server(source, key, name, spec, self.environ, self.home)
            except ConfigError as exc:
                server = exc
            if not use:
                continue
            # A disabled server hides a farther definition of the same name too.
            self.servers.pop(canonical, None)
            self.broken.pop(canonical, None)
            if isinstance(server, ConfigError):
                self.broken[canonical] = (name, server)  # this server is unavailable, not the whole config
            elif server is not None:
                self.servers[canonical] = server

    def _add_policy(self, source: _Source, policy: dict[str, Any]) -> None:
        target = self.admin_policy if source.admin else self.policy
        for name in RULE_LISTS:
            target[name] = target[name] + policy[name]
        if "mode" in policy:
            # The admin's mode is a ceiling: what `_policy.Policy.from_config` reads.
            target["mode_ceiling" if source.admin else "mode"] = policy["mode"]
        if "stricter_mode" in policy:
            self.strictest = _stricter(policy["stricter_mode"], self.strictest)

    def build(self, untrusted: tuple[str, ...] = (), to_trust: tuple[str, ...] = (), *,
              approvals_trusted: bool = True) -> Config:
        servers = {server.name: server for server in self.servers.values()}
        mode = _stricter(self.policy.get("mode", "default"), self.strictest)
        return Config(
            servers=MappingProxyType(servers),
            policy=MappingProxyType({**self.policy, "mode": mode}),
            admin_policy=MappingProxyType(dict(self.admin_policy)),
            hooks=tuple(self.hooks),
            tools=_freeze(self.tools),
            files=tuple(self.files),
            commands=MappingProxyType(dict(self.commands)),
            tools_in_shell=_freeze(self.tools_in_shell),
            shell=ShellLimits(**self.shell),
            broken_servers=MappingProxyType(dict(self.broken.values())),
            fingerprint=_digest({name: s.fingerprint for name, s in servers.items()}),
            untrusted=untrusted,
            to_trust=to_trust,
            approvals_trusted=approvals_trusted,
        )


def _tightening(policy: dict[str, Any]) -> dict[str, Any]:
    """The parts of an untrusted `[policy]` that can only take permissions away."""
    kept = {"allow": (), "ask": policy["ask"], "deny": policy["deny"]}
    if "mode" in policy:
        kept["stricter_mode"] = policy["mode"]
    return kept


def _stricter(mode: str, other: str | None) -> str:
    if other is None:
        return mode
    return min(mode, other, key=MODES.index)
