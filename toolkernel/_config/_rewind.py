"""`[rewind]`: what the journal of changes keeps (issue 38, `_rewind.py`).

    [rewind]
    max_file_mb = 64      # a larger file is recorded "not restorable"
    max_day_mb = 1024     # content stored per day; past it the oldest runs go, then "not restorable"
    keep_days = 7         # runs older than this are dropped
    shell_mb = 32         # recently changed files kept ahead of a shell run that may write what it
                          # does not name (a host %%bash cell): past it, "not restorable", said
    ignore = ["data/raw/**"]   # globs (relative to the workspace) never recorded
    default_ignores = true     # false: virtual environments, caches, node_modules... recorded too
    enabled = true             # false (only in your own config): nothing is recorded

A model module (no I/O). Only trusted files count: a smaller limit or an `ignore` glob records
less, and a cloned repository's config must not quietly turn the way back off: `enabled` counts
only in the person's own file, and is a problem anywhere else. What the journal leaves out by
default, and never records: `_journal/_ignore.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._check import known_keys, string_list, table

if TYPE_CHECKING:
    from ._sources import Source

_NUMBERS = ("max_file_mb", "max_day_mb", "keep_days", "shell_mb")
_SWITCHES = ("default_ignores", "enabled")
_KEYS = (*_NUMBERS, *_SWITCHES, "ignore")


@dataclass(frozen=True)
class RewindLimits:
    max_file_mb: int = 64
    max_day_mb: int = 1024
    keep_days: int = 7
    shell_mb: int = 32
    ignore: tuple[str, ...] = ()
    default_ignores: bool = True
    enabled: bool = True


def rewind_section(source: "Source", raw: Any) -> dict[str, Any]:
    """`[rewind]`: what a file sets (the rest keep their defaults)."""
    checked = table(source, "rewind", raw)
    source.attempt(known_keys, source, "rewind", checked, _KEYS)
    found: dict[str, Any] = {}
    for key in _NUMBERS:
        if key not in checked:
            continue
        value = checked[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            source.problems.append(source.error(f"rewind.{key}", "expected a whole number greater than 0"))
        else:
            found[key] = value
    for key in _SWITCHES:
        if key not in checked:
            continue
        if not isinstance(checked[key], bool):
            source.problems.append(source.error(f"rewind.{key}", "expected true or false"))
        elif key == "enabled" and (source.project or source.admin):
            source.problems.append(source.error("rewind.enabled", "counts only in your own config file "
                                                "(~/.config/toolkernel/toolkernel.toml): a project or an "
                                                "admin file cannot turn the journal of changes off"))
        else:
            found[key] = checked[key]
    if "ignore" in checked:
        globs = source.attempt(string_list, source, "rewind.ignore", checked["ignore"])
        if globs is not None:
            found["ignore"] = tuple(globs)
    return found
