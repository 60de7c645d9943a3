"""`[mcp_servers.NAME]` in toolkernel.toml and `mcpServers` in .mcp.json: `ServerConfig`s.

A server defined again replaces the earlier definition whole (`_merge`); names fold
as everywhere (`_names.fold`), and two names of one file that fold alike are an error.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Literal, Mapping
from urllib.parse import urlsplit

from .._errors import ConfigError, ConfigErrors
from .._names import SERVER_NAME, SERVER_NAME_RULE, fold
from ._check import boolean, choice, join, known_keys, positive_number, string, string_list, string_table, table
from ._expand import EMPTY, Expander, resolve_cwd
from ._sources import Source

LOAD_MODES = ("eager", "on-demand")
# Seconds one MCP tool call may run without a word from the server (its progress
# notifications restart the clock).
DEFAULT_CALL_TIMEOUT = 300.0
_SERVER_KEYS = ("command", "args", "env", "cwd", "url", "headers", "load", "description",
                "trust_annotations", "timeout")
_STDIO_ONLY_KEYS = ("args", "env", "cwd")
_HTTP_ONLY_KEYS = ("headers",)
# `type` values seen in .mcp.json files of Claude Code, Cursor, VS Code and Cline.
_MCP_JSON_TYPES = {"stdio": "stdio", "http": "http", "streamable-http": "http",
                   "streamableHttp": "http", "sse": "sse"}


def _no_mapping() -> Mapping[str, str]:
    return EMPTY


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
        return digest({f.name: _plain(getattr(self, f.name)) for f in fields(self) if f.compare})

    def __hash__(self) -> int:
        return hash(self.fingerprint)


def _plain(value: Any) -> Any:
    # concrete types: an isinstance check against typing.Mapping costs more than the hash
    if isinstance(value, (dict, MappingProxyType)):
        return dict(value)  # the mappings held here are flat str -> str
    return value


def digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def servers_section(source: Source, data: Mapping[str, Any], environ: Mapping[str, str], home: Path,
                    *, build: bool) -> dict[str, ServerConfig | ConfigError | None]:
    """The file's servers keyed by folded name; None for a disabled one (it hides a
    farther definition too); a `ConfigError` for one whose own entry is wrong. Without
    `build`, the entries are only checked (their problems are the file's)."""
    prefix, parse = ("mcpServers", _mcp_json_server) if source.is_json else ("mcp_servers", _toml_server)
    found: dict[str, ServerConfig | None] = {}
    names: dict[str, str] = {}
    for name, entry in (source.attempt(table, source, prefix, data.get(prefix, {})) or {}).items():
        key = join(prefix, name)
        if not source.attempt(_checked_name, source, key, name, names, default=False):
            continue
        if not build:  # checked only: a file that may only tighten starts no server
            source.attempt(parse, source, key, entry)
            continue
        found[fold(name)] = _one_server(source, key, name, entry, parse, environ, home)
    return found


def _checked_name(source: Source, key: str, name: str, names: dict[str, str]) -> bool:
    if not SERVER_NAME.fullmatch(name):
        raise source.error(key, SERVER_NAME_RULE)
    folded = fold(name)
    if folded in names:
        raise source.error(key, f'is the same name as "{names[folded]}" '
                           "(case does not matter, and hyphens and underscores are interchangeable)")
    names[folded] = name
    return True


def _one_server(source: Source, key: str, name: str, entry: Any,
                parse: Callable[[Source, str, Any], dict[str, Any] | None], environ: Mapping[str, str],
                home: Path) -> ServerConfig | ConfigError | None:
    """The server; None when disabled; its problems as one `ConfigError` when its own entry
    is wrong: then only this server is unavailable, and the rest of the config counts (issue 10)."""
    mark = len(source.problems)
    try:
        spec = parse(source, key, entry)
        return None if spec is None else _server(source, key, name, spec, environ, home)
    except ConfigError as exc:
        noted = source.problems[mark:]
        del source.problems[mark:]
        return ConfigErrors([exc, *noted]) if noted else exc


def _toml_server(source: Source, key: str, raw: Any) -> dict[str, Any]:
    entry = table(source, key, raw)
    known_keys(source, key, entry, _SERVER_KEYS)
    spec = _transport(source, key, entry, declared=None)
    spec["load"] = choice(source, f"{key}.load", entry.get("load", "eager"), LOAD_MODES)
    spec["description"] = string(source, f"{key}.description", entry.get("description", ""))
    spec["trust_annotations"] = boolean(source, f"{key}.trust_annotations", entry.get("trust_annotations", True))
    if "timeout" in entry:
        spec["timeout"] = positive_number(source, f"{key}.timeout", entry["timeout"])
    return spec


def _mcp_json_server(source: Source, key: str, raw: Any) -> dict[str, Any] | None:
    """A server of the Claude Code / Cursor / VS Code format.

    Keys other tools add (autoApprove, timeout, ...) are ignored so the same file keeps
    working everywhere; `"disabled": true` (Cline) leaves the server out.
    """
    entry = table(source, key, raw)
    if boolean(source, f"{key}.disabled", entry.get("disabled", False)):
        return None
    declared = None
    if "type" in entry:
        declared = _MCP_JSON_TYPES[choice(source, f"{key}.type", entry["type"], tuple(_MCP_JSON_TYPES))]
    spec = _transport(source, key, entry, declared=declared)
    spec["description"] = string(source, f"{key}.description", entry.get("description", ""))
    return spec


def _transport(source: Source, key: str, entry: Mapping[str, Any], declared: str | None) -> dict[str, Any]:
    transport = _transport_kind(source, key, entry, declared)
    stdio = transport == "stdio"
    for wrong in (_HTTP_ONLY_KEYS if stdio else _STDIO_ONLY_KEYS):
        if wrong in entry:
            kind = 'HTTP servers ("url")' if stdio else 'stdio servers ("command")'
            raise source.error(f"{key}.{wrong}", f"applies only to {kind}")
    if stdio:
        return {"transport": transport,
                "command": string(source, f"{key}.command", entry["command"], empty_ok=False),
                "args": string_list(source, f"{key}.args", entry.get("args", [])),
                "env": string_table(source, f"{key}.env", entry.get("env", {})),
                "cwd": string(source, f"{key}.cwd", entry["cwd"], empty_ok=False) if "cwd" in entry else None}
    return {"transport": transport,
            "url": string(source, f"{key}.url", entry["url"], empty_ok=False),
            "headers": string_table(source, f"{key}.headers", entry.get("headers", {}))}


def _transport_kind(source: Source, key: str, entry: Mapping[str, Any], declared: str | None) -> str:
    has_command, has_url = "command" in entry, "url" in entry
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


def _server(source: Source, key: str, name: str, spec: dict[str, Any],
            environ: Mapping[str, str], home: Path) -> ServerConfig:
    expand = Expander(environ)
    command = expand(spec["command"]) if spec.get("command") else None
    args = expand.each(spec.get("args", ()))
    env = expand.table(spec.get("env", {}))
    cwd = resolve_cwd(expand(spec["cwd"]), source.path.parent, home) if spec.get("cwd") else None
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


def _check_url(source: Source, key: str, url: str) -> None:
    # The URL may carry a token once expanded, so it is never echoed.
    try:
        parts = urlsplit(url)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # e.g. an unclosed [IPv6 address
        valid = False
    if not valid:
        raise source.error(key, "expected an http:// or https:// URL")
