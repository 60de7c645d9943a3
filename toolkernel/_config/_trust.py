"""Workspace trust: a project's config is used only as a person trusted it.

Project config can start code (MCP servers, hooks) and loosen the policy
(allow rules, a looser mode, lasting approvals). A folder someone cloned, or
a file a script wrote, must not do either before a person has looked at it,
as with VS Code's workspace trust and direnv's `allow`.

A person trusts a folder's config *as it is now*: the record keeps a SHA-256
of each config file in the folder (`toolkernel.toml`, `.mcp.json`,
`.toolkernel/approvals.json`; an absent file counts too), and of each file in
the folder that its hooks, servers and command tools execute (`_code`), so any
change, an added file included, needs trust again. The records live outside every
workspace, in `$XDG_STATE_HOME/toolkernel/trust.json` (default
`~/.local/state/toolkernel/trust.json`), where no script can write.

`TOOLKERNEL_TRUST_ALL=1` trusts every folder (CI, containers). User-level
and admin config are always trusted; they are not in a workspace.

Untrusted config still tightens: `_config` keeps its deny and ask rules and
a stricter mode, and drops what would run code or loosen anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from pathlib import Path
from typing import Any, Mapping

from .._atomic import write_atomic
from .._checked_open import read_regular
from .._errors import ConfigError, printable
from ._code import named_files
from ._places import state_folder

TRUST_ALL_VARIABLE = "TOOLKERNEL_TRUST_ALL"
# What a folder's trust covers, relative to the folder.
FINGERPRINTED = ("toolkernel.toml", ".mcp.json", ".toolkernel/approvals.json")
NAMING = ("toolkernel.toml", ".mcp.json")  # the files whose entries name code to run
_VERSION = 1
MAX_CONFIG_BYTES = 1024 * 1024  # a config file is a few KiB; more is a mistake, or an attack


def trust_all(environ: Mapping[str, str] | None = None) -> bool:
    environ = os.environ if environ is None else environ
    return environ.get(TRUST_ALL_VARIABLE, "").strip().lower() in ("1", "true", "yes")


def store_path(environ: Mapping[str, str] | None = None) -> Path:
    return state_folder(environ) / "trust.json"


def read_config_file(path: Path) -> bytes:
    """A config file's bytes: a regular file (a link to one is followed) of at most
    MAX_CONFIG_BYTES. A cloned repository's `.mcp.json -> /dev/zero`, or a pipe, would
    otherwise be read until memory runs out, or for ever, on the first run there."""
    return read_regular(path, MAX_CONFIG_BYTES)


def fingerprints(folder: Path, data: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None,
                 looked_at: list[str] | None = None) -> dict[str, str]:
    """SHA-256 of each config file present in `folder`, and of each file in it the config
    runs (`_code`), by its path relative to `folder`. `data`: the config files as parsed for
    use, by name (else they are parsed here); `looked_at` collects the paths that code was
    looked for at.

    A file that exists but cannot be read (a dangling symlink, no permission)
    gets a marker that no record can hold, so it is never trusted."""
    found: dict[str, str] = {}
    for name in FINGERPRINTED:
        path = folder / name
        if not os.path.lexists(path):
            continue
        try:
            found[name] = digest(read_config_file(path))
        except OSError:
            found[name] = "unreadable"
    parsed = {name: _parsed(folder / name) for name in NAMING if name in found and name not in (data or {})}
    code = named_files(folder, {**parsed, **(data or {})}, os.environ if environ is None else environ, looked_at)
    return {**code, **found}


def _parsed(path: Path) -> Any:
    """A config file's data, or None when it cannot be read (the config's own read says why)."""
    try:
        text = read_config_file(path).decode("utf-8-sig")
        return json.loads(text) if path.name.endswith(".json") else tomllib.loads(text)
    except (OSError, ValueError, RecursionError):
        return None


def _unparsable(folder: Path, names: Mapping[str, str]) -> ConfigError | None:
    """The first config file in `names` that does not parse. Trusted so, it would be of no use (a
    fix changes it, and a changed file needs trust again), and `toolkernel trust` said nothing."""
    for name in FINGERPRINTED:
        if name not in names:
            continue
        try:
            text = read_config_file(folder / name).decode("utf-8-sig")
            json.loads(text) if name.endswith(".json") else tomllib.loads(text)
        except OSError:
            continue  # said as unreadable before this
        except (ValueError, RecursionError) as exc:  # JSON, TOML and UTF-8 errors are ValueErrors
            problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return ConfigError(str(folder / name), None,
                               f"does not parse ({problem}), so it cannot be trusted; fix it, then trust the folder")
    return None


class TrustStore:
    """The trust records of one user: {folder: {file name: sha256}}."""

    def __init__(self, path: Path | None = None, environ: Mapping[str, str] | None = None) -> None:
        self.environ = os.environ if environ is None else environ
        self.path = path or store_path(self.environ)

    def is_trusted(self, folder: Path, parsed: Mapping[str, str] | None = None,
                   data: Mapping[str, Any] | None = None, looked_at: list[str] | None = None) -> bool:
        return not self.changed(folder, parsed, data, looked_at)[0]

    def changed(self, folder: Path, parsed: Mapping[str, str] | None = None, data: Mapping[str, Any] | None = None,
                looked_at: list[str] | None = None) -> tuple[bool, list[str]]:
        """(whether `folder` is untrusted, the files that differ from the record when there is one).

        `parsed`: the digest of each file by name as it was read for use, and `data` what it
        held. Those count, not a second read: a file swapped back to its trusted bytes, or
        removed, between the two reads was used as what it was when read for use, which
        nobody trusted; and the code it names is the code that runs."""
        if trust_all(self.environ):
            return False, []
        current = {**fingerprints(folder, data, self.environ, looked_at), **(parsed or {})}
        if not current:
            return False, []  # nothing there to trust
        record = self._records().get(_key(folder))
        if record is None:
            return True, []
        differ = sorted(name for name in {*record, *current} if record.get(name) != current.get(name))
        return bool(differ), differ

    def trust(self, folder: Path) -> dict[str, str]:
        """Trust `folder`'s config as it is now; returns what was recorded."""
        current = fingerprints(folder, environ=self.environ)
        unreadable = [name for name, digest in current.items() if digest == "unreadable"]
        if unreadable:
            raise ConfigError(str(folder / unreadable[0]), None,
                              "cannot be read, so it cannot be trusted; fix or remove it")
        broken = _unparsable(folder, current)
        if broken is not None:
            raise broken
        records = self._records()
        records[_key(folder)] = current
        self._save(records)
        return current

    def folders(self) -> list[str]:
        """The folders a person trusted (as they were then), by real path."""
        return list(self._records())

    def revoke(self, folder: Path) -> bool:
        records = self._records()
        removed = records.pop(_key(folder), None) is not None
        if removed:
            self._save(records)
        return removed

    def replace(self, folder: Path, name: str, old: bytes | None, new: bytes) -> None:
        """Carry trust over a change toolkernel made for the person itself (a
        lasting approval): when the folder was trusted with the old file, it
        stays trusted with the new one."""
        if trust_all(self.environ):
            return
        before = fingerprints(folder, environ=self.environ)
        before.pop(name, None)
        if old is not None:
            before[name] = digest(old)
        records = self._records()
        if before and records.get(_key(folder)) != before:
            return  # not trusted before the change: the change does not make it so
        records[_key(folder)] = {**before, name: digest(new)}
        self._save(records)

    def _records(self) -> dict[str, dict[str, str]]:
        # A missing store trusts nothing; a broken one is an error, never "trust all".
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise ConfigError(str(self.path), None, f"cannot be read ({exc.strerror})") from exc
        try:
            data = json.loads(raw)
            folders = data["folders"]
            if not isinstance(folders, dict):
                raise TypeError
        except (ValueError, KeyError, TypeError, RecursionError):
            raise ConfigError(str(self.path), None, "is not a toolkernel trust file;"
                              " remove it and trust your folders again") from None
        return {k: dict(v) for k, v in folders.items() if isinstance(v, dict)}

    def _save(self, records: dict[str, dict[str, str]]) -> None:
        body = {"version": _VERSION, "folders": records}
        write_atomic(self.path, json.dumps(body, indent=2, sort_keys=True) + "\n")


def _key(folder: Path) -> str:
    return str(Path(folder).resolve())


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def trust_command(folder: Path, store: TrustStore | None = None) -> str:
    """`toolkernel trust DIR` and `%tools trust [DIR]`: trust and say what was trusted."""
    folder = Path(folder).resolve()
    if not folder.is_dir():
        raise ConfigError(str(folder), None, "is not a folder")
    recorded = (store or TrustStore()).trust(folder)
    if not recorded:
        return f"{printable(str(folder))} has no toolkernel config to trust"
    return f"trusted the config of {printable(str(folder))} as it is now: {printable(', '.join(sorted(recorded)))}"


def how_to_trust(folder: Path | str) -> str:
    # A folder's name is a cloned repository's choosing: written out, a terminal would act on
    # its control characters (see `printable`).
    shown = printable(str(folder))
    return f"`toolkernel trust {shown}` or `%tools trust {shown}` after reading it"


def trust_line(workdir: Path, args: list[str]) -> str:
    """`%tools trust [DIR]` (DIR relative to the kernel's folder). ValueError: bad usage."""
    if len(args) > 1 or any(arg.startswith("-") for arg in args):
        raise ValueError("usage: %tools trust [DIR]  (default: the kernel's folder)")
    return trust_command(Path(workdir) / Path(args[0] if args else ".").expanduser())
