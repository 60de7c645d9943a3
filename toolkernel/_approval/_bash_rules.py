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
not literal, `eval`, `source`/`.`, `exec`, `trap`, `alias`, `coproc`, a
shell given `-c`, a redirection that writes a file (`> 2` is a file; only
`2>&1`-style copies are not), text bash runs that the grammar leaves as
text (backquotes in an unquoted here-document or in `${x:-...}`), `${x@P}`
and `${!x}`, a variable set to a value the checker cannot see (`read x`,
`x=$(...)`) that arithmetic then evaluates (`$((x))` runs `a[$(id)]`), and
setting an environment-style variable (a capital letter in its name:
`PATH=...`, `read PATH`, `printf -v PATH`, `export PATH`, `((PATH=1))`,
`for PATH in`...), which changes what later commands do, and a word that
names toolkernel's own state or config
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

from .._config._rules import is_bash_rule, parse_bash_rule
from ._policy import Decision, Policy

TOOL_NAME = "Bash"
# Unquoted words made only of these characters mean themselves to bash.
_PLAIN = re.compile(r"^[A-Za-z0-9_\-./:,+@%=^]+$")
_SHELLS = {"bash", "sh", "dash", "zsh", "ksh", "fish", "busybox"}
_OPAQUE = {"eval": "`eval` runs text built at run time", "source": "`source` runs another file",
           ".": "`.` runs another file", "exec": "`exec` replaces the shell with a command built from its arguments",
           "trap": "`trap` runs a command string later", "alias": "an alias runs text the checker cannot read",
           "coproc": "the checker cannot read `coproc`"}
# Builtins that set the variables named in their arguments (read from input the script does not show).
_NAME_SETTERS = {"read", "mapfile", "readarray", "getopts", "printf", "wait"}
# Options of those that run a command string, or load code.
_RUNS_OPTION = {"mapfile": "C", "readarray": "C", "hash": "p", "enable": "f"}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INTEGER = re.compile(r"[-+]?[0-9]+")
# Variables bash fills from input the script does not show; `_` is the last word of the last command.
_INPUT_FILLED = {"REPLY", "MAPFILE", "OPTARG", "BASH_REMATCH", "_"}
# In arithmetic: a name that is assigned (`X=1`, `X+=1`, `X++`, `--X`).
_ARITH_ASSIGNED = re.compile(r"(?:\+\+|--)\s*([A-Za-z_]\w*)"
                             r"|([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*(?:\+\+|--|(?:[-+*/%&|^]|<<|>>)?=(?!=))")
# In arithmetic: a name whose value bash evaluates as an expression (`x`, `$x`, `${x}`), not `0x1f` or `16#ff`.
_ARITH_READ = re.compile(r"(?<![\w#$@])([A-Za-z_]\w*)|\$\{?([A-Za-z_]\w*)")
_ARITH_TESTS = {"-eq", "-ne", "-lt", "-le", "-gt", "-ge"}
# Deny and ask rules also see the command these run, so `Bash(rm *)` catches `sudo rm`.
_WRAPPERS = {"command", "builtin", "env", "nohup", "nice", "sudo", "time", "timeout", "xargs", "stdbuf", "setsid"}
_SAFE_TARGETS = {"/dev/null", "/dev/stdout", "/dev/stderr"}
_WRITES = {">", ">>", ">|", "&>", "&>>", "<>"}
_CONTROL_FILES = {".toolkernel", "toolkernel.toml", ".mcp.json"}


# -- rules -------------------------------------------------------------------


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
    assignments: int = 0  # how many `VAR=value` words come before the name

    def views(self) -> list[tuple[str | None, ...]]:
        """The command itself, without its `VAR=value` words, its bare name (`/bin/rm` as `rm`),
        and what a wrapper runs."""
        views = [self.words]
        words = self.words[self.assignments:]
        if self.assignments:
            views.append(words)
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
    # Variables the script gives a value the checker cannot vouch is a plain number (None: a name
    # built at run time); bash evaluates such a value as code when arithmetic reads it.
    unvouched: set[str | None] = field(default_factory=set, repr=False)
    arithmetic: list[str] = field(default_factory=list, repr=False)  # the texts bash evaluates as arithmetic


def analyze(script: str) -> Script:
    tree = _parser().parse(script.encode())
    found = Script()
    if tree.root_node.has_error:
        found.unreadable.append("bash could not be parsed (a syntax error, or syntax the checker does not know)")
    for node in _walk(tree.root_node):
        _visit(node, found)
    for text in found.arithmetic:
        _check_arithmetic(text, found)
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
        _declaration(node, found)
    elif kind == "variable_assignment" and node.parent is not None and node.parent.type != "command":
        _assignment(node, found)
    elif kind in ("for_statement", "c_style_for_statement"):
        _loop_variable(node, found)
    elif kind == "expansion":
        _expansion(node, found)
    elif kind == "heredoc_redirect":
        _heredoc(node, found)
    elif kind == "unary_expression" and node.child_count == 2 and _text(node.children[0]) in ("-v", "-R"):
        _named_variable(node.children[1], found)
    elif kind in ("file_redirect",):
        _redirect(node, found)
    _collect_arithmetic(node, found)
    if node.child_count == 0:
        _unparsed_substitution(node, found)


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
    if base in _OPAQUE and not (base == "trap" and _only_options(words[1 + len(assignments):])):
        found.unreadable.append(f"{_OPAQUE[base]}: `{text}`")
    elif base in _RUNS_OPTION and any(_has_option(w, _RUNS_OPTION[base]) for w in words[1:]):
        found.unreadable.append(f"`{base} -{_RUNS_OPTION[base]}` runs or loads code the checker cannot read: `{text}`")
    elif base in _SHELLS and any(w is None or (w.startswith("-") and "c" in w[1:]) for w in words[1:]):
        found.unreadable.append(f"a shell given a command string runs text the checker cannot read: `{text}`")
    if any(_names_control_file(w) for w in words[1:]):
        found.unreadable.append(f"`{text}` touches toolkernel's own state or config")
    if base in _NAME_SETTERS or base == "let":
        _builtin_sets(base, args, text, found)
    if base in ("test", "["):
        for flag, operand in zip(args, args[1:]):
            if _text(flag) in ("-v", "-R"):
                _named_variable(operand, found)
    for word in map(_text, args):  # `{NAME}>&1` stores a new file descriptor's number in NAME
        if word.startswith("{") and word.endswith("}") and _IDENTIFIER.fullmatch(word[1:-1]):
            _sets(word[1:-1], True, text, found)
    found.parts.append(Part(words, text, len(assignments)))


def _names_control_file(word: str | None) -> bool:
    if word is None:
        return False
    value = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
    return any(piece in _CONTROL_FILES for piece in value.split("/"))


def _has_option(word: str | None, letter: str) -> bool:
    return word is not None and word.startswith("-") and not word.startswith("--") and letter in word[1:]


def _only_options(words: tuple[str | None, ...]) -> bool:
    # `trap`, `trap -p`, `trap -l` and `trap - EXIT` list or reset; anything else is a command string.
    return not words or words[0] in ("-", "-p", "-l", "")


def _sets(name: str | None, is_number: bool, text: str, found: Script) -> None:
    """The script sets the variable `name` (None: a name built at run time)."""
    if name is None:
        found.unreadable.append(f"`{text}` sets a variable whose name is built at run time")
    elif any(ch.isupper() for ch in name):
        found.unreadable.append(f"`{text}` changes an environment variable that later commands see")
    if not is_number:
        found.unvouched.add(name)


def _assignment(node, found: Script) -> None:
    name = node.child_by_field_name("name")
    if name is None:
        return
    if name.type == "subscript":  # `a[i]=v`: the array `a`
        name = name.child_by_field_name("name") or name.named_children[0]
    value = node.child_by_field_name("value")
    literal = _literal(value) if value is not None else ""
    is_number = value is None or value.type == "arithmetic_expansion" or (
        literal is not None and _INTEGER.fullmatch(literal) is not None)
    _sets(_text(name), is_number and "+=" not in _text(node), _text(node), found)


def _declaration(node, found: Script) -> None:
    keyword = node.children[0].type  # export, declare, local, readonly, unset...
    words = tuple(_literal(c) for c in node.named_children)
    text = _text(node)
    found.parts.append(Part((keyword, *words), text))
    if keyword != "unset" and any(_has_option(w, "n") or _has_option(w, "i") for w in words):
        # `declare -n r=PATH` makes `r=...` set PATH; `declare -i` makes every later assignment arithmetic.
        found.unreadable.append(f"`{text}` makes a variable a reference or an integer, which the checker cannot follow")
    for child in node.named_children:
        if child.type == "variable_name":  # `export X`, `local X`, `unset X`: changes what later commands see
            _sets(_text(child), True, text, found)
        elif child.type != "variable_assignment":  # an option, or a quoted `'a[i]=1'`
            word = _literal(child)
            if word is None or not word.startswith(("-", "+")):
                _sets_word(word if word is None else word.split("=", 1)[0], text, found)


def _builtin_sets(base: str, arg_nodes: list, text: str, found: Script) -> None:
    """`read X`, `printf -v X`, `mapfile X`, `getopts abc X`, `wait -p X`, `let X=1` set X."""
    args = tuple(_literal(a) for a in arg_nodes)
    if base == "let":
        for arg in args:
            if arg is None:
                found.unreadable.append(f"`{text}`: arithmetic the checker cannot read")
            else:
                found.arithmetic.append(arg)
        return
    if base in ("printf", "wait"):
        names = _option_values(args, [_may_be_option(a) for a in arg_nodes], "v" if base == "printf" else "p")
    elif base == "getopts":  # getopts OPTSTRING NAME [ARGS]
        names = list(args[1:2])
    else:  # read, mapfile, readarray: the words that look like names
        names = [a for a in args if a is None or _IDENTIFIER.fullmatch(a.split("[", 1)[0] or "-")]
    for name in names:
        _sets_word(name, text, found)


def _sets_word(word: str | None, text: str, found: Script) -> None:
    """A builtin sets the variable this word names: `x`, or `a[i]`, whose subscript is arithmetic."""
    if word is None:
        _sets(None, False, text, found)
        return
    name, bracket, rest = word.partition("[")
    if bracket:
        found.arithmetic.append(rest.rpartition("]")[0])
    _sets(name, False, text, found)


def _named_variable(node, found: Script) -> None:
    """`test -v NAME` and `[[ -R NAME ]]` look the name up, and bash expands a subscript in it."""
    word = _literal(node)
    text = _text(node)
    if word is None and re.fullmatch(r"[A-Za-z_]\w*\[[^$`'\"\\]*\]", text):
        word = text
    if word is None:
        found.unreadable.append(f"`{text}` names a variable built at run time")
    elif "[" in word:
        found.arithmetic.append(word.partition("[")[2].rpartition("]")[0])


def _may_be_option(node) -> bool:
    """Whether the word could begin with `-` when bash runs it (`"%s\\n"` cannot, `"$opt"` can)."""
    text = _text(node).lstrip("\"'")
    return not text or text[0] in "-$`*?[{\\~"


def _option_values(args: tuple[str | None, ...], may_be_option: list[bool], letter: str) -> list[str | None]:
    """The values of `-v NAME` / `-vNAME` among the leading options (None: cannot be known)."""
    names: list[str | None] = []
    for i, arg in enumerate(args):
        if not may_be_option[i]:
            break
        if arg is None:
            if i + 1 < len(args):  # it could be `-vNAME` (`printf "$opt" FORMAT`)
                names.append(None)
            break
        if arg == "--" or not arg.startswith("-"):
            break
        if letter in arg[1:]:
            rest = arg[arg.index(letter, 1) + 1:]
            names.extend([rest] if rest else args[i + 1: i + 2])
    return names


def _loop_variable(node, found: Script) -> None:
    if node.type == "c_style_for_statement":
        body = node.child_by_field_name("body")
        end = body.start_byte if body is not None else node.end_byte
        found.arithmetic.append(node.text[: end - node.start_byte].decode(errors="replace"))
        return
    name = node.child_by_field_name("variable")
    values = node.children_by_field_name("value")
    literals = [_literal(v) for v in values]
    is_number = (node.children[0].type == "for" and bool(values)
                 and all(v is not None and _INTEGER.fullmatch(v) for v in literals))
    if name is not None:
        _sets(_text(name), is_number, f"{node.children[0].type} {_text(name)}", found)


def _expansion(node, found: Script) -> None:
    text = _text(node)
    tokens = [c.type for c in node.children]
    if "@" in tokens and tokens.index("@") + 1 < len(tokens) and tokens[tokens.index("@") + 1] == "P":
        # The value is expanded as a prompt: its `$(...)` and backquotes run.
        found.unreadable.append(f"`{text}` expands a value as a prompt, which runs the commands in it")
    if len(tokens) > 1 and tokens[1] == "!" and not re.fullmatch(r"\$\{![A-Za-z_]\w*(?:[*@]|\[[*@]\])\}", text):
        # `${!x}` reads the variable x names, and bash expands a subscript there (`a[$(id)]` runs).
        found.unreadable.append(f"`{text}` reads a variable named at run time")
    if "=" in tokens or ":=" in tokens:  # `${X:=v}` assigns X
        name = node.child_by_field_name("name") or next(
            (c for c in node.named_children if c.type == "variable_name"), None)
        if name is not None:
            _sets(_text(name), False, text, found)
    if ":" in tokens:  # `${x:offset:length}`: both are arithmetic
        start = node.children[tokens.index(":")].start_byte - node.start_byte
        found.arithmetic.append(node.text[start + 1: -1].decode(errors="replace"))


def _substitutions(text: str) -> Iterator[int]:
    """Where bash would substitute in this text: each unescaped backquote, `$(`, `${` and `$[`."""
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == "`" or (text[i] == "$" and text[i + 1: i + 2] in ("(", "{", "[")):
            yield i
        i += 1


def _heredoc(node, found: Script) -> None:
    start = next((c for c in node.children if c.type == "heredoc_start"), None)
    body = next((c for c in node.children if c.type == "heredoc_body"), None)
    if start is None or body is None or any(q in _text(start) for q in "'\"\\"):
        return  # a quoted delimiter: the body is literal text
    # The grammar reads `$(...)` and `${...}` in the text (walked as usual), but not backquotes,
    # and it takes `$((...))` for a subshell.
    parsed = {c.start_byte - body.start_byte for c in body.named_children
              if c.type in ("command_substitution", "expansion")}
    raw = _text(body)
    if any(raw[i] == "`" or raw[i + 1] == "[" or raw.startswith("$((", i) or i not in parsed
           for i in _substitutions(raw)):
        found.unreadable.append("a here-document runs `...`, `$((...))` or `$(...)` in its text that the checker"
                                " cannot read (quote its delimiter, <<'EOF', for plain text)")


def _unparsed_substitution(node, found: Script) -> None:
    # The grammar leaves some backquotes and `$(` as plain text (`${x:-`id`}`); bash runs them.
    if node.type in ("raw_string", "ansi_c_string", "comment", "heredoc_body", "heredoc_content",
                     "`", "$(", "${", "$((", "$["):
        return
    if next(_substitutions(_text(node)), None) is not None:
        found.unreadable.append(f"`{_text(node.parent or node)}` runs a substitution the checker cannot read")


def _collect_arithmetic(node, found: Script) -> None:
    """The texts bash evaluates as arithmetic: there a variable's value is evaluated as code."""
    kind = node.type
    if kind == "arithmetic_expansion" or (kind == "compound_statement" and node.children
                                          and node.children[0].type == "(("):
        found.arithmetic.append(_text(node))
    elif kind == "subscript":
        index = node.child_by_field_name("index")
        found.arithmetic.append(_text(index) if index is not None else _text(node))
    elif kind == "binary_expression" and _in_double_brackets(node) and any(
            _text(c) in _ARITH_TESTS for c in node.children if c.type == "test_operator"):
        found.arithmetic.append(_text(node))  # `[[ x -eq y ]]` (`[` and `test` take only numbers)


def _in_double_brackets(node) -> bool:
    while node is not None and node.type != "test_command":
        node = node.parent
    return node is not None and node.children[0].type == "[["


def _check_arithmetic(text: str, found: Script) -> None:
    for match in _ARITH_ASSIGNED.finditer(text):
        name = match.group(1) or match.group(2)
        if any(ch.isupper() for ch in name):
            found.unreadable.append(f"`{text}` changes an environment variable that later commands see")
            return
    # Command output and the script's arguments (`$1`, `$@`) are text the checker does not see.
    if "`" in text or re.search(r"\$\((?!\()|\$\{?[0-9@*]", text):
        found.unreadable.append(f"`{text}` evaluates text the checker cannot see as arithmetic")
        return
    for match in _ARITH_READ.finditer(text):
        name = match.group(1) or match.group(2)
        if name in found.unvouched or None in found.unvouched or name in _INPUT_FILLED:
            found.unreadable.append(f"`{text}` evaluates the value of `{name}` as arithmetic, which can run commands")
            return


def _redirect(node, found: Script) -> None:
    operator = next((c.type for c in node.children if not c.is_named), "")
    target = node.child_by_field_name("destination")
    if operator not in _WRITES | {">&"} or target is None:
        return
    path = _literal(target)
    if path in _SAFE_TARGETS:
        return
    # Only `>&2`, `2>&1`, `3>&1-` and `>&-` copy or close a descriptor; `> 2` and `>& out` write a file.
    if operator == ">&" and path is not None and re.fullmatch(r"[0-9]+-?|-", path):
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
