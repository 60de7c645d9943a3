"""`[policy]`: the mode and the allow / ask / deny rules, each rule parsed once here.

The rules come out as `_rules.Rule`s, which the policy and the hooks use as
they are. The vocabulary of the file is here: the modes (`accept_edits` is
`accept-edits`) and the admin file's `mode_ceiling`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterator, Mapping

from ._rules import MODES, Rule, parse_rule
from ._check import expect, known_keys, string, table, choice
from ._sources import Source

POLICY_MODES = ("default", "accept-edits", "plan", "bypass-permissions")
RULE_LISTS = ("allow", "ask", "deny", "network")


@dataclass(frozen=True)
class PolicySection(Mapping[str, Any]):
    """One `[policy]`, or several merged. `mode` is None when no file set one; for the
    admin file's policy it is the ceiling (`mode_ceiling`).

    It also reads as the table it came from (only the keys that are set), which is
    what `Policy.from_config` takes."""

    allow: tuple[Rule, ...] = ()
    ask: tuple[Rule, ...] = ()
    deny: tuple[Rule, ...] = ()
    mode: str | None = None
    mode_ceiling: str | None = None
    # Calls and agent cells whose host programs keep the network inside the OS sandbox
    # (`tool__pip`, `Bash(pip install *)`): it loosens, so only a trusted file's count.
    network: tuple[Rule, ...] = ()

    def __getitem__(self, key: str) -> Any:
        if key not in self._keys():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def _keys(self) -> tuple[str, ...]:
        return (*[name for name in ("mode", "mode_ceiling") if getattr(self, name) is not None],
                *[name for name in RULE_LISTS if name != "network" or self.network])

    def then(self, nearer: "PolicySection") -> "PolicySection":
        """This policy with a nearer file's after it: rule lists concatenate, its mode wins."""
        return PolicySection(self.allow + nearer.allow, self.ask + nearer.ask, self.deny + nearer.deny,
                             nearer.mode or self.mode, network=self.network + nearer.network)

    def tightening(self) -> "PolicySection":
        """What an untrusted file's policy keeps: what can only take permissions away
        (its mode counts only where it is stricter, `stricter`)."""
        return replace(self, allow=(), mode=None, network=())


def stricter(mode: str, other: str | None) -> str:
    if other is None:
        return mode
    return min(mode, other, key=MODES.index)


def policy_section(source: Source, raw: Any) -> PolicySection:
    checked = table(source, "policy", raw)
    modes = ("mode", "mode_ceiling") if source.admin else ("mode",)
    source.attempt(known_keys, source, "policy", checked, (*modes, *RULE_LISTS))
    if len(set(modes) & set(checked)) > 1:
        raise source.error("policy.mode_ceiling", 'set "mode" or "mode_ceiling", not both')
    mode = None
    for name in modes:
        if name in checked:
            mode = source.attempt(_mode, source, f"policy.{name}", checked[name])
    lists = {name: rules(source, f"policy.{name}", checked.get(name, [])) for name in RULE_LISTS}
    return PolicySection(**lists, mode=mode)


def _mode(source: Source, key: str, value: Any) -> str:
    # accept_edits is accept-edits, as everywhere else in toolkernel
    spelled = value.replace("_", "-") if isinstance(value, str) else value
    if spelled in POLICY_MODES:
        return spelled
    return choice(source, key, value, POLICY_MODES)


def rules(source: Source, key: str, value: Any) -> tuple[Rule, ...]:
    """An array of rules; each bad entry is its own problem."""
    if source.attempt(expect, source, key, value, list, "an array of strings") is None:
        return ()
    parsed = (source.attempt(rule, source, f"{key}[{index}]", text) for index, text in enumerate(value))
    return tuple(r for r in parsed if r is not None)


def rule(source: Source, key: str, text: Any) -> Rule:
    string(source, key, text, empty_ok=False)
    try:
        return parse_rule(text)
    except ValueError as exc:
        raise source.error(key, str(exc)) from None
