"""`[rewind]`: what the journal of changes keeps (issue 38, `_rewind.py`).

    [rewind]
    max_file_mb = 64      # a larger file is recorded "not restorable"
    max_day_mb = 1024     # content stored per day; past it the oldest runs go, then "not restorable"
    keep_days = 7         # runs older than this are dropped
    ignore = ["data/raw/**"]   # globs (relative to the workspace) never recorded

A model module (no I/O). Only trusted files count: a smaller limit or an `ignore` glob records
less, and a cloned repository's config must not quietly turn the way back off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._check import known_keys, string_list, table

if TYPE_CHECKING:
    from ._sources import Source

_NUMBERS = ("max_file_mb", "max_day_mb", "keep_days")
_KEYS = (*_NUMBERS, "ignore")


@dataclass(frozen=True)
class RewindLimits:
    max_file_mb: int = 64
    max_day_mb: int = 1024
    keep_days: int = 7
    ignore: tuple[str, ...] = ()


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
    if "ignore" in checked:
        globs = source.attempt(string_list, source, "rewind.ignore", checked["ignore"])
        if globs is not None:
            found["ignore"] = tuple(globs)
    return found
