"""`[tools_in_shell]` (seed 000): whether `toolkernel serve` offers the shell, and the
tools it keeps visible as direct tools beside it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._rules import Rule
from ._check import boolean, known_keys, table
from ._policy import rules
from ._sources import Source

_KEYS = ("enabled", "keep_visible")


@dataclass(frozen=True)
class ToolsInShell:
    # None in one file's section: the file does not say (a farther file's value stands).
    enabled: bool | None = None
    keep_visible: tuple[Rule, ...] | None = None

    def then(self, nearer: "ToolsInShell") -> "ToolsInShell":
        """Key by key, the nearer file winning where it says something."""
        return ToolsInShell(self.enabled if nearer.enabled is None else nearer.enabled,
                            self.keep_visible if nearer.keep_visible is None else nearer.keep_visible)

    def settled(self) -> "ToolsInShell":
        """The section as used: on, nothing kept visible, unless a file says otherwise."""
        return ToolsInShell(self.enabled is not False, self.keep_visible or ())


def tools_in_shell_section(source: Source, raw: Any) -> ToolsInShell:
    checked = table(source, "tools_in_shell", raw)
    source.attempt(known_keys, source, "tools_in_shell", checked, _KEYS)
    enabled = (source.attempt(boolean, source, "tools_in_shell.enabled", checked["enabled"])
               if "enabled" in checked else None)
    visible = rules(source, "tools_in_shell.keep_visible", checked["keep_visible"]) if "keep_visible" in checked else None
    return ToolsInShell(enabled, visible)
