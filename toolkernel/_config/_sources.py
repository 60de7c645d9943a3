"""Where the config files are, and reading one of them.

Lowest precedence first: the admin file (`$TOOLKERNEL_ADMIN_CONFIG`, default
`/etc/toolkernel/toolkernel.toml`), the user file (`$XDG_CONFIG_HOME/toolkernel/
toolkernel.toml`), then the project files found walking up from the working directory:
in each directory `.mcp.json` and then `toolkernel.toml`, a nearer directory winning.
The walk stops at the home directory when the working directory is inside it (a
`~/.config` is never mistaken for a project) and at the filesystem root otherwise.

A project folder's config counts whole only when the folder is trusted (`_trust`) and
nobody but its owners may write it; `Doubts` says why not. A config file that exists
but cannot be read (a dangling symlink, no permission) is an error, never absent.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, TypeVar

from .._checked_open import NotAFile, TooLarge
from .._errors import ConfigError, printable
from ._check import table
from ._trust import MAX_CONFIG_BYTES, TrustStore, digest, how_to_trust, read_config_file

CONFIG_NAME = "toolkernel.toml"
MCP_JSON_NAME = ".mcp.json"
DEFAULT_ADMIN_PATH = Path("/etc/toolkernel") / CONFIG_NAME
ADMIN_PATH_VARIABLE = "TOOLKERNEL_ADMIN_CONFIG"
# tomllib ends its messages with "(at line N, column M)" or "(at end of document)".
_TOML_WHERE = re.compile(r"(.*?)\s*\(at (?:line (\d+), column (\d+)|end of document)\)", re.S)

T = TypeVar("T")
# What a file nested past the parser's depth is (Python's parsers raise RecursionError there).
TOO_DEEP = "nested too deeply to read (more levels than any config has); fix or remove it"


def home(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("HOME") or Path.home())


def admin_path(environ: Mapping[str, str]) -> Path:
    return Path(environ.get(ADMIN_PATH_VARIABLE) or DEFAULT_ADMIN_PATH)


def user_config_dir(environ: Mapping[str, str], home: Path) -> Path:
    return Path(environ.get("XDG_CONFIG_HOME") or home / ".config") / "toolkernel"


def project_dirs(start: Path, home: Path) -> list[Path]:
    """`start` and its parents, nearest first, up to home or the root."""
    dirs = [start, *start.parents]
    if home in dirs:
        dirs = dirs[: dirs.index(home) + 1]
    return dirs


def sources(workdir: Path, environ: Mapping[str, str], *, user_dir: Path | None = None,
            admin: Path | None = None) -> list["Source"]:
    """Every file that may hold config for `workdir`, lowest precedence first."""
    where = home(environ)
    found = [Source(admin or admin_path(environ), admin=True),
             Source((user_dir or user_config_dir(environ, where)) / CONFIG_NAME)]
    for directory in reversed(project_dirs(workdir.resolve(), where.resolve())):
        found += [Source(directory / MCP_JSON_NAME, project=True), Source(directory / CONFIG_NAME, project=True)]
    return list(_unique(found))


def _unique(found: Iterable["Source"]) -> Iterator["Source"]:
    seen: set[Path] = set()
    for source in found:
        key = source.path.absolute()
        if key not in seen:
            seen.add(key)
            yield source


def world_writable(path: Path) -> bool:
    try:
        return bool(path.stat().st_mode & stat.S_IWOTH)
    except OSError:
        return True


class Doubts:
    """Why a project folder's config may only tighten: untrusted, or writable by anyone."""

    def __init__(self, store: TrustStore, *, as_trusted: bool = False) -> None:
        self.store = store
        self.as_trusted = as_trusted  # note the doubts, but fold every file in whole (lint)
        self.found: dict[Path, str] = {}
        self.parsed: dict[Path, dict[str, str]] = {}  # the digests of the files read for use, by folder
        self.data: dict[Path, dict[str, Any]] = {}  # what they held: the code they name is what runs
        self.code_paths: list[str] = []  # where code the config runs was looked for (see _cache)
        self.judged: dict[Path, str | None] = {}

    def saw(self, source: "Source", data: dict[str, Any] | None) -> None:
        """Note a project file as read for use (every file, before `about` judges any: a folder's
        trust covers both of its files and the code they name)."""
        if source.project and source.digest is not None:
            folder = source.path.parent
            self.parsed.setdefault(folder, {})[source.path.name] = source.digest
            self.data.setdefault(folder, {})[source.path.name] = data

    def of(self, folder: Path) -> str | None:
        if folder not in self.judged:  # once a read: the code a folder names is read to judge it
            self.judged[folder] = self._judge(folder)
        return self.judged[folder]

    def _judge(self, folder: Path) -> str | None:
        if world_writable(folder):
            return "anyone may write to the folder, so its config is not trusted; remove write access for others (chmod o-w)"
        untrusted, changed = self.store.changed(folder, self.parsed.get(folder), self.data.get(folder),
                                                self.code_paths)
        if not untrusted:
            return None
        if changed:
            return (f"its config is not trusted: {printable(', '.join(changed))} changed since it was trusted"
                    f" (or cannot be read); trust it again with {how_to_trust(folder)}")
        return f"its config is not trusted yet (or changed since); trust it with {how_to_trust(folder)}"

    def about(self, source: "Source") -> str | None:
        if not source.project:
            return None
        folder = source.path.parent
        doubt = self.of(folder) or _writable_file(source.path)
        if doubt:
            self.found.setdefault(folder, doubt)
        return None if self.as_trusted else doubt

    def notes(self) -> tuple[str, ...]:
        return tuple(f"{folder}: {doubt}" for folder, doubt in self.found.items())

    def to_trust(self) -> tuple[str, ...]:
        return tuple(str(folder) for folder, doubt in self.found.items() if "toolkernel trust" in doubt)


def _writable_file(path: Path) -> str | None:
    if world_writable(path):
        return f"anyone may write to {path.name}, so it is not trusted; remove write access for others (chmod o-w)"
    return None


@dataclass(frozen=True)
class Source:
    """One config file, and the problems found in it so far (all are reported at once)."""

    path: Path
    admin: bool = False
    project: bool = False
    problems: list[ConfigError] = field(default_factory=list, compare=False, repr=False)
    # SHA-256 of the bytes `read` parsed (what trust must have seen), once read.
    read_digests: list[str] = field(default_factory=list, compare=False, repr=False)

    @property
    def digest(self) -> str | None:
        return self.read_digests[-1] if self.read_digests else None

    @property
    def is_json(self) -> bool:
        return self.path.name.endswith(".json")

    def error(self, key: str | None, problem: str) -> ConfigError:
        return ConfigError(str(self.path), key, problem)

    def attempt(self, check: Callable[..., T], *args: Any, default: T | None = None) -> T | None:
        """`check(*args)`, or `default` once its ConfigError is noted: one wrong entry
        must not hide the wrong entries after it."""
        mark = len(self.problems)
        try:
            return check(*args)
        except ConfigError as exc:
            self.problems.insert(mark, exc)  # before what `check` noted on its way: file order
            return default

    def read(self) -> dict[str, Any] | None:
        """The file's data; None only when nothing is there at all.

        A name that exists but leads nowhere (a dangling symlink, a path through
        a file) is an error: taking it as absent would drop its deny rules."""
        try:
            raw = read_config_file(self.path)
        except (FileNotFoundError, NotADirectoryError):
            if os.path.lexists(self.path):
                raise self.error(None, "is a symlink to nothing; fix or remove it") from None
            return None
        except IsADirectoryError:
            raise self.error(None, "is a directory, expected a file") from None
        except NotAFile:
            raise self.error(None, "is not a regular file (it is or leads to a pipe, device or "
                                   "socket); a config file must be a file") from None
        except TooLarge:
            raise self.error(None, f"is larger than {MAX_CONFIG_BYTES // 1024 // 1024} MiB; no config "
                                   "file is that big") from None
        except OSError as exc:
            raise self.error(None, f"cannot read the file ({exc.strerror or exc})") from exc
        self.read_digests.append(digest(raw))
        text = self._decode(raw)
        data = self._parse_json(text) if self.is_json else self._parse_toml(text)
        where = _nul_at(data)
        if where is not None:
            raise self.error(where or None, "holds a NUL character (\\u0000), which no command, argument,"
                                            " path or environment variable can carry")
        return data

    def _decode(self, raw: bytes) -> str:
        try:
            return raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise self.error(None, f"not UTF-8 text (bad byte at offset {exc.start})") from exc

    def _parse_toml(self, text: str) -> dict[str, Any]:
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise self.error(None, _toml_problem(str(exc), text)) from exc
        except RecursionError:  # a cloned repository's `a = [[[[...` : no config is that deep
            raise self.error(None, TOO_DEEP) from None

    def _parse_json(self, text: str) -> dict[str, Any]:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            problem = f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
            raise self.error(None, problem) from exc
        except RecursionError:
            raise self.error(None, TOO_DEEP) from None
        return table(self, None, data)


def _nul_at(data: Any) -> str | None:
    """The dotted key of the first string holding a NUL (a key's own name too), else None.
    Walked without recursion: a file's nesting is bounded only by the parser's."""
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        value, key = stack.pop()
        if isinstance(value, str):
            if "\0" in value:
                return key
            continue
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for name, item in reversed(list(items)):  # file order: the first one is said
            shown = name if isinstance(name, int) else name.replace("\0", "\\u0000")  # said, not sent
            inner = f"{key}[{shown}]" if isinstance(name, int) else f"{key}.{shown}" if key else shown
            stack.append((item, inner))
            if isinstance(name, str) and "\0" in name:
                stack.append((name, inner))
    return None


def _toml_problem(message: str, text: str) -> str:
    parsed = _TOML_WHERE.fullmatch(message)
    if not parsed:
        return f"invalid TOML: {message}"
    reason, line, column = parsed.groups()
    where = (f"line {line}, column {column}" if line
             else f"the end of the file (line {text.count(chr(10)) + 1})")
    return f"invalid TOML at {where}: {reason}"
