"""A host `%%bash` cell as one `Bash` call: split it into commands and check each against `Bash(...)` rules.

Pure logic, no I/O (parsing is computation): used only for cells an agent
started; a cell a person runs is theirs. The `tools` calls inside any cell
are checked one by one by the dispatcher as always.

Rules live in the `[policy]` lists beside the tool rules:

    Bash(git status)     `git status`, with any further words (`git status --short`);
                         a prefix rule with a word boundary: not `git statusx`
    Bash(git *)          `git` with anything after it; a `*` word alone takes
                         one word, at the end any number; inside a word it is a glob
    Bash(*)              every command

The script is parsed with tree-sitter's bash grammar (the parser behind
editors' bash support) and split on `&&`, `||`, `;`, `|`, `&` and newlines,
into command substitutions, subshells, loops and function bodies. Every simple
command is one part and must be allowed. What cannot be read asks whatever
the rules say (a deny still denies): a parse error, a command name that is
not literal, `eval`, `source`/`.`, `exec`, a shell given `-c`, a redirection
that writes a file, an assignment to an environment-style variable (a
capital letter in its name, e.g. `PATH=...`), which changes what later
commands do, and a word that names toolkernel's own state or config
(`.toolkernel/`, `toolkernel.toml`, `.mcp.json`): an agent's cell that touches
them (an answer file under `.toolkernel/pending/` is a person's approval) is
put to a person. Only literal words can be seen, so this is a courtesy, not
the guarantee: a command that can write any file runs with the person's
power over files.

Order, as for tools: the administrator's deny rules, deny, plan mode, ask
rules, what cannot be read, allow rules, the mode (only bypass-permissions
runs a command no rule allows).
"""

from __future__ import annotations

import functools
import re
import shlex
from dataclasses import dataclass, field
from typing import Iterator

from ._policy import Decision, Policy

TOOL_NAME = "Bash"
_RULE = re.compile(r"^\s*bash\s*\((.*)\)\s*$", re.IGNORECASE | re.DOTALL)
# Unquoted words made only of these characters mean themselves to bash.
_PLAIN = re.compile(r"^[A-Za-z0-9_\-./:,+@%=^]+$")
_SHELLS = {"bash", "sh", "dash", "zsh", "ksh", "fish", "busybox"}
_OPAQUE = {"eval": "`eval` runs text built at run time", "source": "`source` runs another file",
           ".": "`.` runs another file", "exec": "`exec` replaces the shell with a command built from its arguments"}
# Deny and ask rules also see the command these run, so `Bash(rm *)` catches `sudo rm`.
_WRAPPERS = {"command", "builtin", "env", "nohup", "nice", "sudo", "time", "timeout", "xargs", "stdbuf", "setsid"}
_SAFE_TARGETS = {"/dev/null", "/dev/stdout", "/dev/stderr"}
_WRITES = {">", ">>", ">|", "&>", "&>>", "<>"}
_CONTROL_FILES = {".toolkernel", "toolkernel.toml", ".mcp.json"}


# -- rules -------------------------------------------------------------------


def is_bash_rule(text: str) -> bool:
    return isinstance(text, str) and _RULE.match(text) is not None


@functools.lru_cache(maxsize=1024)
def parse_bash_rule(text: str) -> tuple[str, ...]:
    """The rule's words; `ValueError` for a malformed one."""
    match = _RULE.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a Bash(...) rule")
    try:
        words = tuple(shlex.split(match.group(1)))
    except ValueError as exc:
        raise ValueError(f"bad rule {text!r}: {exc}") from None
    if not words:
        raise ValueError(f"bad rule {text!r}: give a command prefix, or `*` for every command")
    return words


def _word_matches(pattern: str, word: str | None) -> bool:
    if word is None:  # not literal: only `*` covers it
        return pattern == "*"
    return re.fullmatch(".*".join(re.escape(p) for p in pattern.split("*")), word, re.DOTALL) is not None


def rule_covers(words: tuple[str, ...], command: tuple[str | None, ...]) -> bool:
    """Prefix match, word by word; a `*` word at the end takes any number of words (none too)."""
    if words[-1] == "*":
        words = words[:-1]
    if len(command) < len(words):
        return False
    return all(_word_matches(p, w) for p, w in zip(words, command))


# -- the script --------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """One simple command: its words (None where a word is not literal) and its text."""

    words: tuple[str | None, ...]
    text: str

    def views(self) -> list[tuple[str | None, ...]]:
        """The command itself, its bare name (`/bin/rm` as `rm`), and what a wrapper runs."""
        views = [self.words]
        words = self.words
        while words and words[0] is not None:
            base = words[0].rsplit("/", 1)[-1]
            if base != words[0]:
                views.append((base, *words[1:]))
            if base not in _WRAPPERS:
                break
            words = _after_wrapper(words[1:])
            if words:
                views.append(words)
        return views


def _after_wrapper(words: tuple[str | None, ...]) -> tuple[str | None, ...]:
    # Options and VAR=value words of the wrapper come first; `timeout` and `nice` take a number.
    i = 0
    while i < len(words) and (words[i] is None or words[i].startswith("-") or "=" in words[i]
                              or words[i].replace(".", "", 1).isdigit()):
        i += 1
    return words[i:]


@dataclass
class Script:
    parts: list[Part] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # why a part of it asks whatever the rules say


def analyze(script: str) -> Script:
    tree = _parser().parse(script.encode())
    found = Script()
    if tree.root_node.has_error:
        found.unreadable.append("bash could not be parsed (a syntax error, or syntax the checker does not know)")
    for node in _walk(tree.root_node):
        _visit(node, found)
    return found


@functools.lru_cache(maxsize=1)
def _parser():
    import tree_sitter
    import tree_sitter_bash

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


def _walk(node) -> Iterator:
    yield node
    for child in node.children:
        yield from _walk(child)


def _visit(node, found: Script) -> None:
    kind = node.type
    if kind == "command":
        _command(node, found)
    elif kind in ("declaration_command", "unset_command"):
        keyword = node.children[0].type  # export, declare, local, readonly, unset...
        found.parts.append(Part((keyword, *(_literal(c) for c in node.named_children)), _text(node)))
    elif kind == "variable_assignment" and node.parent is not None and node.parent.type != "command":
        _assignment(node, found)
    elif kind in ("file_redirect",):
        _redirect(node, found)


def _command(node, found: Script) -> None:
    name_node = node.child_by_field_name("name")
    assignments = [c for c in node.named_children if c.type == "variable_assignment"]
    if name_node is None:  # `FOO=1` alone: handled as assignments
        for a in assignments:
            _assignment(a, found)
        return
    args = [c for c in node.children_by_field_name("argument")]
    words = tuple(_literal(a) for a in (*assignments, name_node, *args))
    text = _text(node)
    name = _literal(name_node)
    if name is None:
        found.unreadable.append(f"the command name in `{text}` is built at run time")
        return
    base = name.rsplit("/", 1)[-1]
    if base in _OPAQUE:
        found.unreadable.append(f"{_OPAQUE[base]}: `{text}`")
    elif base in _SHELLS and any(w is None or (w.startswith("-") and "c" in w[1:]) for w in words[1:]):
        found.unreadable.append(f"a shell given a command string runs text the checker cannot read: `{text}`")
    if any(_names_control_file(w) for w in words[1:]):
        found.unreadable.append(f"`{text}` touches toolkernel's own state or config")
    found.parts.append(Part(words, text))


def _names_control_file(word: str | None) -> bool:
    if word is None:
        return False
    value = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
    return any(piece in _CONTROL_FILES for piece in value.split("/"))


def _assignment(node, found: Script) -> None:
    name = node.child_by_field_name("name")
    if name is not None and any(ch.isupper() for ch in _text(name)):
        found.unreadable.append(f"`{_text(node)}` changes an environment variable that later commands see")


def _redirect(node, found: Script) -> None:
    operator = next((c.type for c in node.children if not c.is_named), "")
    target = node.child_by_field_name("destination")
    if operator not in _WRITES or target is None:
        return
    path = _literal(target)
    if path in _SAFE_TARGETS or (path is not None and path.isdigit()) or path == "-":
        return
    found.unreadable.append(f"`{_text(node)}` writes a file")


def _text(node) -> str:
    return node.text.decode(errors="replace")


def _literal(node) -> str | None:
    """The word's value when it has no expansion, glob or escape; else None."""
    kind = node.type
    text = _text(node)
    if kind in ("word", "number"):
        return text if _PLAIN.match(text) else None
    if kind == "command_name":
        return _literal(node.named_children[0]) if node.named_child_count == 1 else None
    if kind == "raw_string":
        return text[1:-1]
    if kind == "string":
        parts = node.named_children
        if all(p.type == "string_content" for p in parts) and "\\" not in text:
            return "".join(_text(p) for p in parts)
        return None
    if kind == "concatenation":
        pieces = [_literal(c) for c in node.named_children]
        return None if any(p is None for p in pieces) else "".join(pieces)
    if kind == "variable_assignment":
        return text if "$" not in text and "`" not in text else None
    return None


# -- the decision ------------------------------------------------------------


def _bash_rules(rules: tuple[str, ...]) -> list[tuple[str, tuple[str, ...]]]:
    return [(rule, parse_bash_rule(rule)) for rule in rules if is_bash_rule(rule)]


def _first_cover(rules: list[tuple[str, tuple[str, ...]]], part: Part, *, views: bool) -> str | None:
    candidates = part.views() if views else [part.words]
    for rule, words in rules:
        if any(rule_covers(words, view) for view in candidates):
            return rule
    return None


def decide_script(script: Script, policy: Policy) -> Decision:
    """Allow, ask or deny a whole cell (each part must be allowed)."""
    for rules, who in ((policy.admin_deny, "the administrator's rule"), (policy.deny, "the rule")):
        listed = _bash_rules(rules)
        for part in script.parts:
            rule = _first_cover(listed, part, views=True)
            if rule:
                return Decision("deny", f"`{part.text}` is denied by {who} {rule!r}", rule)
    mode = policy.effective_mode
    if mode == "plan":
        return Decision("deny", "plan mode runs no bash command")
    asks = _bash_rules(policy.ask)
    for part in script.parts:
        rule = _first_cover(asks, part, views=True)
        if rule:
            return Decision("ask", f"the rule {rule!r} asks for approval of `{part.text}`", rule)
    if script.unreadable:
        return Decision("ask", script.unreadable[0])
    allows = _bash_rules(policy.allow)
    for part in script.parts:
        if _first_cover(allows, part, views=False) is None and mode != "bypass-permissions":
            return Decision("ask", f"no Bash(...) rule allows `{part.text}` in {mode} mode")
    return Decision("allow", "every command is allowed by a Bash(...) rule" if script.parts else "nothing to run")


def decide_bash(text: str, policy: Policy) -> Decision:
    return decide_script(analyze(text), policy)


def rule_for_script(text: str) -> str:
    """The rule "always allow" adds for an agent's cell: its one command as a prefix rule."""
    script = analyze(text)
    words = script.parts[0].words if len(script.parts) == 1 else ()
    if script.unreadable or not words or any(w is None for w in words):
        raise ValueError("this cell is not one plain command, so no single rule names it; allow it once, or add"
                         " Bash(...) rules for its commands to [policy] allow in toolkernel.toml")
    return f"{TOOL_NAME}({shlex.join(words)})"
