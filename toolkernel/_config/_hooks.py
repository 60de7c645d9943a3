"""`[[hooks]]`: command hooks, with the event names a file may use.

Files say `pre_call`/`before_call` and `post_call`/`after_call`; the hooks of
`_approval._hooks` know only `before_call` and `after_call`, so the spelling of the
file stays here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ._rules import Rule
from ._check import choice, expect, known_keys, positive_number, string_list, table
from ._policy import rule
from ._sources import Source

# The spelling in files (either) and the event it is.
HOOK_EVENTS = {"pre_call": "before_call", "before_call": "before_call",
               "post_call": "after_call", "after_call": "after_call"}
DEFAULT_HOOK_TIMEOUT = 30.0
_HOOK_KEYS = ("event", "match", "command", "timeout")


@dataclass(frozen=True)
class HookConfig:
    event: Literal["before_call", "after_call"]
    match: Rule
    command: tuple[str, ...]
    cwd: str  # the folder of the file that defines it
    source: str
    timeout: float = DEFAULT_HOOK_TIMEOUT


def hooks_section(source: Source, raw: Any) -> tuple[HookConfig, ...]:
    expect(source, "hooks", raw, list, "an array of tables ([[hooks]])")
    found = (source.attempt(_hook, source, f"hooks[{index}]", entry) for index, entry in enumerate(raw))
    return tuple(hook for hook in found if hook is not None)


def _hook(source: Source, key: str, raw: Any) -> HookConfig:
    entry = table(source, key, raw)
    known_keys(source, key, entry, _HOOK_KEYS)
    for required in ("event", "command"):
        if required not in entry:
            raise source.error(f"{key}.{required}", 'missing; a hook needs "event" and "command"')
    event = choice(source, f"{key}.event", entry["event"], tuple(HOOK_EVENTS))
    return HookConfig(
        event=HOOK_EVENTS[event],  # type: ignore[arg-type]
        match=rule(source, f"{key}.match", entry.get("match", "*")),
        command=string_list(source, f"{key}.command", entry["command"], empty_ok=False),
        cwd=str(source.path.parent),
        source=str(source.path),
        timeout=positive_number(source, f"{key}.timeout", entry["timeout"]) if "timeout" in entry
        else DEFAULT_HOOK_TIMEOUT,
    )
