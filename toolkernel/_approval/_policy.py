"""What the approval layer decides for one call: allow, ask or deny.

Pure logic, no I/O: the dispatcher hands in a `CallInfo` (the resolved tool,
its input and its kind) and a `Policy` (built once from the config, the admin
file and the lasting approvals) and gets a `Decision` back.

Rule syntax (one string per rule; hyphens and underscores are interchangeable,
`*` is the only wildcard):

    read_file                    toolkernel's own tool, by bare name
    tool__ripgrep                a custom command tool
    mcp_github__delete_branch    an MCP tool (`mcp__github__delete_branch` too)
    mcp_github                   every tool of one MCP server (= `mcp_github__*`)
    github list-pulls            the command form (`tools github list-pulls` too)
    github *                     every tool of a server; `git*` does not name
                                 `github list-pulls`: in the command form a `*`
                                 in the server word stays inside that word
    github get-pull(repo=acme/*, number=7)
                                 an input constraint: each listed key must be in
                                 the input and its value (a string as is,
                                 anything else as compact JSON) must match the
                                 glob; quote a value holding `,` or `)` as a
                                 JSON string: `(title="a, b")`. Keys are exact,
                                 as the tool's schema spells them; since a
                                 server may read `Repo` as `repo` or ignore it
                                 and use a default, a constraint fails closed:
                                 in an allow rule a key only counts when spelled
                                 exactly and no other spelling is in the input,
                                 while a deny or ask rule also covers a call
                                 that spells the key otherwise or leaves out a
                                 key the tool's schema has (it may default)
    read-file(path=secrets/*)    on a path argument (`Tool.path_keys`) the glob,
                                 `.` and `..` folded, is matched against where the
                                 path leads (links and `..` resolved, as the
                                 dispatcher hands it in `CallInfo.path_forms`):
                                 relative to the workspace when inside it,
                                 absolute (`/etc/*`), and under the home folder
                                 `~/...` (`~/.ssh/*`); an allow rule matches only
                                 that, a deny or ask rule the text as written too,
                                 so `./secrets/x`, `notes/../secrets/x`, its
                                 absolute path and a link into `secrets/` are all
                                 `secrets/*`. A notebook on a server is matched as
                                 the server names it

Order: the administrator's deny rules, deny, `--read-only` (only read calls
run), ask, allow; the first match wins.
The mode decides what no rule covers. Things no allow rule can lift: a
non-read call in `plan` mode is denied, and a call that touches a path outside
the workspace or a protected file asks (a deny still denies). A call that would
write a module at the workspace's top in place of an installed one
(`CallInfo.shadows`) asks in every mode, bypass-permissions too; only an allow
rule that names that very path (`write-file(path=requests.py)`, no `*`) lifts it.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Mapping

from .._config._rules import MODES, Rule, _Rule, normalize_qualified_name, parse_rule
from .._names import parse_qualified
# One folding rule for tool names, rule words and input keys.
from .._names import fold as _norm

if TYPE_CHECKING:
    from .._shadowing import Shadow

Kind = Literal["read", "edit", "execute"]
Action = Literal["allow", "ask", "deny"]

UNSANDBOXED = ("an agent's run would start a program on the host, and this machine has no OS sandbox to hold"
               " it (none, or Landlock asked for the network, which it cannot hold: `toolkernel doctor`"
               " says why), so a person is asked every time")


@dataclass(frozen=True)
class CallInfo:
    qualified_name: str  # "mcp_github__delete_branch", "read_file", "tool__ripgrep"
    command: str  # "tools github delete-branch"
    input: Mapping[str, Any]
    kind: Kind
    outside_workspace: bool = False
    # The call would write toolkernel's own config or approvals (see _protected.py).
    protected: bool = False
    # An agent's call that would start a host program where no OS sandbox can hold it.
    unsandboxed: bool = False
    # What the call would write at the workspace's top that a Python started there imports in
    # place of an installed module (see _shadowing.py): each path key's, worked out by the dispatcher.
    shadows: tuple["Shadow", ...] = ()
    # The input keys the tool's schema names; None when unknown (any key may have a default).
    schema_keys: frozenset[str] | None = None
    # What a person asked about the call sees beside the input (a command tool's argv);
    # made only when someone is shown the call, never matched by rules.
    shown: Callable[[], Mapping[str, Any]] = field(default=lambda: {}, compare=False)
    # Where each path argument leads (real paths by key), resolved once for the checks above;
    # the tool is handed the same paths, so what was judged is what it opens.
    paths: Mapping[str, Any] = field(default_factory=dict, compare=False)
    # What a rule's pattern on a path argument is matched against, by key: where the path leads,
    # relative to the workspace when inside it, and absolute (see `rule_forms` in _paths.py).
    path_forms: Mapping[str, tuple[str, ...]] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str  # human text: which rule or mode decided
    rule: str | None = None


HookAction = Literal["continue", "allow", "deny", "ask"]
_ACTIONS = ("continue", "allow", "deny", "ask")


@dataclass
class HookOutcome:
    action: HookAction = "continue"
    reason: str = ""
    input: Mapping[str, Any] | None = None  # the rewritten input, if any

    def __post_init__(self) -> None:
        if self.action not in _ACTIONS:
            raise ValueError(f"a hook action is one of {', '.join(_ACTIONS)}, not {self.action!r}")


# -- names -------------------------------------------------------------------


def _command_tails(call: CallInfo) -> set[str]:
    """The call as command words after `tools`, from its command and its name."""
    tails = set()
    words = call.command.split()
    if words and words[0] == "tools":
        words = words[1:]
    if words:
        tails.add(" ".join(_norm(w) for w in words))
    tails.add(_tail_from_qualified(normalize_qualified_name(call.qualified_name)))
    return tails


def _tail_from_qualified(name: str) -> str:
    parsed = parse_qualified(name)
    if parsed.kind == "mcp" and parsed.tool is not None:
        return f"{parsed.server} {parsed.tool}"
    return parsed.tool or name


# -- rules -------------------------------------------------------------------


def _value_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(_canonical(value), separators=(",", ":"), sort_keys=True, ensure_ascii=False, default=str)


_NO_FORMS: Mapping[str, tuple[str, ...]] = MappingProxyType({})


def _input_matches(rule: _Rule, call: CallInfo, *, grants: bool) -> bool:
    """Whether every constraint holds. A rule that grants (allow) needs the exact key
    and no look-alike; a rule that restricts (deny, ask) takes any spelling and a
    missing key as a match, since the server may read either or fill in a default.
    On a path argument a granting rule matches only where the path leads (`./x`, `a/../x`,
    a link are all their target), a restricting one also the text as written."""
    data, forms = call.input, call.path_forms or _NO_FORMS
    for key, pattern, as_path, _ in rule.constraints:
        values = [value for name, value in data.items() if isinstance(name, str) and _norm(name) == _norm(key)]
        exact = key in data
        if grants:
            holds = exact and len(values) == 1 and (
                any(as_path.fullmatch(form) for form in forms[key]) if key in forms
                else bool(pattern.fullmatch(_value_text(data[key]))))
        else:
            holds = (not exact and (bool(values) or _may_default(key, call.schema_keys))
                     or any(pattern.fullmatch(_value_text(value)) for value in values)
                     # (a path key spelled otherwise held above: forms are by the exact key)
                     or key in forms and any(as_path.fullmatch(form) for form in forms[key]))
        if not holds:
            return False
    return True


def _may_default(key: str, schema_keys: frozenset[str] | None) -> bool:
    return schema_keys is None or any(_norm(name) == _norm(key) for name in schema_keys)


def rule_matches(rule: str, call: CallInfo, *, grants: bool = True) -> bool:
    """Whether `rule` covers `call` (its tool and, if the rule says so, its input);
    `grants` is False for deny and ask rules (see `_input_matches`)."""
    parsed = parse_rule(rule).parsed
    return _names_match(parsed, call) and _input_matches(parsed, call, grants=grants)


def _names_match(rule: _Rule, call: CallInfo) -> bool:
    if rule.name_pattern is not None:
        if rule.name_pattern.matches(normalize_qualified_name(call.qualified_name)):
            return True
    return any(rule.command_pattern.fullmatch(tail) for tail in _command_tails(call))


def canonical_call_key(qualified_name: str, input: Mapping[str, Any]) -> str:
    """One string per distinct call: the tool's normalized name and its input
    as canonical JSON (sorted keys, no spaces, 7.0 written as 7)."""
    body = {"tool": normalize_qualified_name(qualified_name), "input": _canonical(input)}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _canonical(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# -- policy ------------------------------------------------------------------


def normalize_mode(mode: str) -> str:
    """`accept_edits`, `Accept-Edits` and `accept-edits` are one mode."""
    if not isinstance(mode, str):
        raise ValueError(f"a mode must be a string, not {type(mode).__name__}")
    normal = mode.strip().lower().replace("_", "-")
    if normal not in MODES:
        raise ValueError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    return normal


@dataclass(frozen=True)
class Policy:
    mode: str = "default"
    allow: tuple[Rule, ...] = ()
    ask: tuple[Rule, ...] = ()
    deny: tuple[Rule, ...] = ()
    admin_deny: tuple[Rule, ...] = ()
    admin_mode_ceiling: str | None = None
    read_only: bool = False  # `%%tools --read-only`: every call that is not a read is denied
    network: tuple[Rule, ...] = ()  # [policy] network: sandboxed calls and cells that keep it

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", normalize_mode(self.mode))
        if self.admin_mode_ceiling is not None:
            object.__setattr__(self, "admin_mode_ceiling", normalize_mode(self.admin_mode_ceiling))
        for name in ("allow", "ask", "deny", "admin_deny", "network"):  # rules from the config come parsed
            object.__setattr__(self, name, tuple(parse_rule(rule) for rule in getattr(self, name)))

    @property
    def effective_mode(self) -> str:
        if self.admin_mode_ceiling is None:
            return self.mode
        return min(self.mode, self.admin_mode_ceiling, key=MODES.index)

    @classmethod
    def from_config(
        cls,
        policy: Mapping[str, Any] | None,
        admin_policy: Mapping[str, Any] | None,
        extra_allow: Iterable[str] = (),
    ) -> "Policy":
        """Build from the merged `[policy]` table, the admin file's `[policy]`
        table and the lasting approvals.

        The admin's `mode` (or `mode_ceiling`) is a ceiling, its `deny` rules
        come before every other rule, its `ask` rules before the project's (so
        no allow rule lifts them) and its `allow` rules join the others.
        Raises `ValueError` naming the list and position of a bad entry."""
        policy = policy or {}
        admin = admin_policy or {}
        ceiling_key = "mode_ceiling" if "mode_ceiling" in admin else "mode"
        ceiling = admin.get(ceiling_key)
        return cls(
            mode=_checked_mode(policy.get("mode", "default"), "policy.mode"),
            allow=(_rules(policy.get("allow"), "policy.allow") + _rules(admin.get("allow"), "admin policy.allow")
                   + _rules(list(extra_allow), "lasting approvals")),
            ask=_rules(admin.get("ask"), "admin policy.ask") + _rules(policy.get("ask"), "policy.ask"),
            deny=_rules(policy.get("deny"), "policy.deny"),
            admin_deny=_rules(admin.get("deny"), "admin policy.deny"),
            admin_mode_ceiling=None if ceiling is None else _checked_mode(ceiling, f"admin policy.{ceiling_key}"),
            network=_rules(policy.get("network"), "policy.network"),
        )

    def grants_network(self, call: CallInfo) -> bool:
        """Whether a `[policy] network` rule lets `call`'s host program keep the network in the
        OS sandbox (pure)."""
        return bool(self.network) and _first_match(self.network, call) is not None


def _checked_mode(mode: Any, where: str) -> str:
    try:
        return normalize_mode(mode)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _rules(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValueError(f"{where}: expected a list of rule strings, got {type(value).__name__}")
    for index, rule in enumerate(value):
        try:
            parse_rule(rule)
        except ValueError as exc:
            raise ValueError(f"{where}[{index}]: {exc}") from None
    return tuple(value)


# -- the decision ------------------------------------------------------------


def _first_match(rules: Iterable[str], call: CallInfo, *, grants: bool = False) -> str | None:
    if not rules:  # most lists are empty: no generator to make on every call
        return None
    return next((rule for rule in rules if rule_matches(rule, call, grants=grants)), None)


def deny_rule_covers(policy: Policy, qualified_name: str, command: str, kind: Kind) -> bool:
    """Whether a deny rule (the administrator's or the config's) denies every call of this
    tool whatever its input: such a tool is left out of every list. A rule with an input
    constraint covers only some inputs (an empty input with no schema keys matches none)."""
    info = CallInfo(qualified_name, command, {}, kind, schema_keys=frozenset())
    return _first_match((*policy.admin_deny, *policy.deny), info) is not None


def decide(call: CallInfo, policy: Policy, hook: "HookOutcome | None" = None) -> Decision:
    """Allow, ask or deny `call`.

    `hook` is what the pre-call hooks said (`Hooks.run_before`): a hook's
    `deny` denies, its `ask` acts as an ask rule and its `allow` as an allow
    rule, so a hook never lifts a deny rule, plan mode or the workspace
    boundary."""
    rule = _first_match(policy.admin_deny, call)
    if rule:
        return Decision("deny", f"denied by the administrator's rule {rule!r}", rule)
    rule = _first_match(policy.deny, call)
    if rule:
        return Decision("deny", f"denied by the rule {rule!r}", rule)
    if hook is not None and hook.action == "deny":
        return Decision("deny", hook.reason or "denied by a pre-call hook")
    if policy.read_only and call.kind != "read":
        return Decision("deny", "the cell runs with --read-only: only read-only calls run")
    mode = policy.effective_mode
    if mode == "plan" and call.kind != "read":
        return Decision("deny", f"plan mode runs only read-only calls{_capped(policy)}")
    if hook is not None and hook.action == "ask":
        return Decision("ask", hook.reason or "a pre-call hook asks for approval")
    rule = _first_match(policy.ask, call)
    if rule:
        return Decision("ask", f"the rule {rule!r} asks for approval", rule)
    if call.outside_workspace:
        return Decision("ask", "the call touches a path outside the workspace")
    if call.protected:
        return Decision("ask", "the call would change a file that decides policy or runs on the host"
                               " (toolkernel's config or approvals, a git hook, code a configured program runs)")
    if call.shadows:
        return _shadowing(call, policy)
    if call.unsandboxed:
        return Decision("ask", UNSANDBOXED)
    rule = _first_match(policy.allow, call, grants=True)
    if rule:
        return Decision("allow", f"allowed by the rule {rule!r}", rule)
    if hook is not None and hook.action == "allow":
        return Decision("allow", hook.reason or "allowed by a pre-call hook")
    return _by_mode(call.kind, mode, _capped(policy))


def _shadowing(call: CallInfo, policy: Policy) -> Decision:
    """A write that would stand in for an installed module: the person's next `import` in a kernel
    started there runs it. Asked whatever the mode; allowed only by a rule naming the path itself."""
    keys = {shadow.key for shadow in call.shadows}
    rule = next((rule for rule in policy.allow if _names_paths(rule, keys) and rule_matches(rule, call)), None)
    if rule:
        return Decision("allow", f"allowed by the rule {rule!r}, which names the path", rule)
    reasons = "; ".join(shadow.reason for shadow in call.shadows)
    return Decision("ask", f"{reasons}: a Python started in the workspace (a kernel) would import it instead,"
                           " so this write asks in every mode")


def _names_paths(rule: str, keys: set[str]) -> bool:
    """Whether the rule pins each of these path keys to one path (a constraint without `*`)."""
    exact = {constraint.key for constraint in parse_rule(rule).parsed.constraints if constraint.exact}
    return keys <= exact


@functools.lru_cache(maxsize=64)  # a pure function of a few words, made for most calls: one Decision each
def _by_mode(kind: str, mode: str, capped: str) -> Decision:
    if kind == "read":
        return Decision("allow", f"read-only calls run in {mode} mode{capped}")
    if mode == "bypass-permissions":
        return Decision("allow", f"bypass-permissions mode runs everything not denied{capped}")
    if kind == "edit" and mode == "accept-edits":
        return Decision("allow", f"edits run in accept-edits mode{capped}")
    what = "an edit" if kind == "edit" else "a call that may change something"
    return Decision("ask", f"{what} needs approval in {mode} mode{capped}")


def _capped(policy: Policy) -> str:
    if policy.effective_mode == policy.mode:
        return ""
    return f" (the administrator caps the mode at {policy.admin_mode_ceiling}; the project asks for {policy.mode})"
