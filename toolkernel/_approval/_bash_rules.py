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
and `${!x}`, setting an environment-style variable (a capital letter in its
name: `PATH=...`, `read PATH`, `printf -v PATH`, `export PATH`, `((PATH=1))`,
`for PATH in`...), which changes what later commands do, and a cell with no
command at all that still expands a value.

Arithmetic evaluates a variable's value as an expression, and a subscript in
that text runs a command (`x='a[$(id)]'; echo $((x))` runs `id`). So every
arithmetic text (`$((...))`, `((...))`, `for ((...))`, `let`, both sides of
`[[ -eq ]]` and its kin, `${x:offset:length}`, a subscript: `a[i]`, `${a[i]}`,
`a=([i]=v)`, `read 'a[i]'`, `[[ -v a[i] ]]`) asks unless each name in it is one
the cell surely set to a literal integer before (`x=5` as a statement of its
own earlier in the same sequence, `for i in 1 2`, `for ((i=0; ...))`) and sets
to nothing else anywhere, and it expands nothing but such names, lengths
(`${#x}`) and `$#`, `$?`, `$$`, `$!`. Whatever bash or the environment fills
(`BASH_COMMAND`, `PWD`, `REPLY`, `$1`, `_`, a variable the cell did not set)
is unseen. `declare -i` and `-n` ask. `builtin`, `command` and `time` are seen
through (`time read x` sets x).

A word that names toolkernel's own state or config (`.toolkernel/`,
`toolkernel.toml`, `.mcp.json`) asks as well: an agent's cell that touches
them (an answer file under `.toolkernel/pending/` is a person's approval) is
put to a person. That is a courtesy, not the guarantee: only literal words can
be seen (`cp x .tool*/`, a path built at run time), and a command that can
write any file runs with the person's power over files. What protects those
files must hold below bash, not in this checker.

Order, as for tools: the administrator's deny rules, deny, plan mode, ask
rules, what cannot be read, allow rules, the mode (only bypass-permissions
runs a command no rule allows).
"""

from __future__ import annotations

import dataclasses
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
_RUNS_OPTION = {"mapfile": "C", "readarray": "C", "hash": "p", "enable": "f", "jobs": "x"}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INTEGER = re.compile(r"[-+]?[0-9]+")
# In arithmetic: a name that is assigned (`X=1`, `X+=1`, `X++`, `--X`).
_ARITH_ASSIGNED = re.compile(r"(?:\+\+|--)\s*([A-Za-z_]\w*)"
                             r"|([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*(?:\+\+|--|(?:[-+*/%&|^]|<<|>>)?=(?!=))")
# In arithmetic: a name (`x`, `$x`, `${x}`, `$!x`), not a digit of `0x1f`, `16#ff`, `64#a@b` or `${#x}`.
_ARITH_NAME = re.compile(r"(?<![A-Za-z0-9_#@])([A-Za-z_][A-Za-z0-9_]*)")
# The only expansions arithmetic may hold: a name's value (vouched for like a bare name), a length, a
# count, `$#`, `$?`, `$$`, `$!` and nested `$((`. `${x:1}`, `${PWD##*/}`, `$1`, `$@`, `$-`, `$(...)` ask.
_ARITH_EXPANSION = re.compile(r"\$(?:\(\(|[#?$!]|[A-Za-z_]\w*|\{[A-Za-z_]\w*\}|\{#[A-Za-z_]\w*(?:\[[@*]\])?\})")
_ARITH_TESTS = {"-eq", "-ne", "-lt", "-le", "-gt", "-ge"}
# Statements here run one after another, each only after those before it (not `if`: its branches
# are siblings). A variable set here holds its value for the rest of the node.
_SEQUENCES = {"program", "compound_statement", "do_group", "subshell"}
# These run the builtin named after them in this shell, where it sets variables (`time read x`).
_IN_THIS_SHELL = {"builtin", "command", "time"}
_DECLARATIONS = {"declare", "typeset", "local", "export", "readonly", "unset"}
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


@dataclass(frozen=True)
class Arithmetic:
    """A text bash evaluates as arithmetic, where a variable's value is evaluated as code."""

    text: str
    start: int  # the script's byte where it begins
    exact: bool = True  # whether text[i] is the script's byte start + i (not for a quoted word)

    def at(self, index: int) -> int:
        return self.start + len(self.text[:index].encode()) if self.exact else self.start


@dataclass
class Script:
    parts: list[Part] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # why a part of it asks whatever the rules say
    # Variables the script may give a value that is not a plain number (None: a name built at run
    # time): a literal other than an integer, input, unset, a value for one command.
    unvouched: set[str | None] = field(default_factory=set, repr=False)
    # (name, from, to, in_function): between these bytes the script has surely set `name` to a literal
    # integer; in a function, not for a function defined there (called later, where the local is gone).
    vouched: list[tuple[str, int, int, bool]] = field(default_factory=list, repr=False)
    functions: list[tuple[int, int]] = field(default_factory=list, repr=False)  # their bytes
    # (body from, body to, redirection): bash expands a here-document's body when the command with
    # the redirection runs, before what follows it on its line.
    heredocs: list[tuple[int, int, int]] = field(default_factory=list, repr=False)
    arithmetic: list[Arithmetic] = field(default_factory=list, repr=False)
    expands: bool = field(default=False, repr=False)  # whether any value is expanded or evaluated


def analyze(script: str) -> Script:
    tree = _parser().parse(script.encode())
    found = Script()
    if tree.root_node.has_error:
        found.unreadable.append("bash could not be parsed (a syntax error, or syntax the checker does not know)")
    for node in _walk(tree.root_node):
        _visit(node, found)
    for arithmetic in found.arithmetic:
        _check_arithmetic(arithmetic, found)
    if found.expands and not found.parts:
        # Nothing here is a command the rules could allow; what it expands or evaluates is not seen.
        found.unreadable.append("the cell runs no command, only expansions or tests the checker cannot vouch for")
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


_EXPANDS = {"simple_expansion", "expansion", "command_substitution", "process_substitution", "arithmetic_expansion"}


def _visit(node, found: Script) -> None:
    kind = node.type
    if kind in _EXPANDS:
        found.expands = True
    elif kind == "function_definition":
        found.functions.append((node.start_byte, node.end_byte))
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
    for a in assignments:  # `x=v cmd`: x holds v for this command only (a function reads it)
        name = a.child_by_field_name("name")
        found.unvouched.add(_text(name) if name is not None else None)
    args = [c for c in node.children_by_field_name("argument")]
    words = tuple(_literal(a) for a in (*assignments, name_node, *args))
    text = _text(node)
    if _spans_lines(node):
        found.unreadable.append(f"the checker's grammar read more than one line as the command `{text}`")
    found.parts.append(Part(words, text, len(assignments)))
    if any(_names_control_file(w) for w in words[1:]):
        found.unreadable.append(f"`{text}` touches toolkernel's own state or config")
    for word in map(_text, args):  # `{NAME}>&1` stores a new file descriptor's number in NAME
        if word.startswith("{") and word.endswith("}") and _IDENTIFIER.fullmatch(word[1:-1]):
            _sets(word[1:-1], True, text, found)
    nodes = [name_node, *args]
    while _literal(nodes[0]) in _IN_THIS_SHELL:  # `time read x` is `read x`, in this shell
        nodes = nodes[1:]
        while nodes and _text(nodes[0]).startswith("-"):  # `command -p`, `time -p`
            nodes = nodes[1:]
        if not nodes:
            return
    _builtin(nodes[0], nodes[1:], text, found)


def _builtin(name_node, args: list, text: str, found: Script) -> None:
    """What the command named by `name_node` does to this shell beyond its words, if anything."""
    name = _literal(name_node)
    if name is None:
        found.unreadable.append(f"the command name in `{text}` is built at run time")
        return
    base = name.rsplit("/", 1)[-1]
    words = tuple(_literal(a) for a in args)
    if base in _OPAQUE and not (base == "trap" and _only_options(words)):
        found.unreadable.append(f"{_OPAQUE[base]}: `{text}`")
    elif base in _RUNS_OPTION and any(_has_option(w, _RUNS_OPTION[base]) for w in words):
        found.unreadable.append(f"`{base} -{_RUNS_OPTION[base]}` runs or loads code the checker cannot read: `{text}`")
    elif base in _SHELLS and any(w is None or (w.startswith("-") and "c" in w[1:]) for w in words):
        found.unreadable.append(f"a shell given a command string runs text the checker cannot read: `{text}`")
    elif base in _DECLARATIONS:  # the grammar reads `declare x=1` as a declaration, not as a command
        found.unreadable.append(f"the checker does not follow `{base}` run this way: `{text}`")
    if base in _NAME_SETTERS or base == "let":
        _builtin_sets(base, args, text, found)
    if base in ("test", "["):
        for flag, operand in zip(args, args[1:]):
            if _text(flag) in ("-v", "-R"):
                _named_variable(operand, found)


def _spans_lines(node) -> bool:
    """Whether a newline bash ends the command at lies between its words (the grammar reads
    `a=1 b=2` and the next line, `for ((...))`, as one command, with `((...))` as subshells)."""
    script = node.text
    gaps = (script[a.end_byte - node.start_byte: b.start_byte - node.start_byte]
            for a, b in zip(node.children, node.children[1:]))
    return any(re.search(rb"(?<!\\)\n", gap) for gap in gaps)


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
    element = name.type == "subscript"
    if element:  # `a[i]=v`: the array `a`
        name = name.child_by_field_name("name") or name.named_children[0]
    value = node.child_by_field_name("value")
    literal = _literal(value) if value is not None else ""
    is_number = "+=" not in _text(node) and (value is None or value.type == "arithmetic_expansion" or (
        literal is not None and _INTEGER.fullmatch(literal) is not None))
    _sets(_text(name), is_number, _text(node), found)
    if is_number and not element:  # `a[1]=1` leaves `a`, which is a[0], as it was
        _vouch_after(node, _text(name), found)


def _vouch_after(node, name: str, found: Script) -> None:
    """`name=1` as a statement of its own: from there to the end of its sequence, `name` holds a number
    (unless the script sets it otherwise somewhere, which `unvouched` records)."""
    statement = node.parent if node.parent is not None and node.parent.type in (
        "variable_assignments", "declaration_command") else node
    sequence = statement.parent
    if sequence is None or sequence.type not in _SEQUENCES or sequence.children[0].type == "((":
        return
    if statement.children[0].type == "local" and not _in_function(node):
        return  # `local` outside a function fails, and x keeps the environment's value
    after = statement.next_sibling
    if after is not None and after.type == "&":  # `x=1 &` sets x in a background subshell only
        return
    found.vouched.append((name, statement.end_byte, sequence.end_byte, _in_function(node)))


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
            _sets(_text(child), False, text, found)  # and `x` keeps a value from the environment, or has none
        elif child.type != "variable_assignment":  # an option, or a quoted `'a[i]=1'`
            word = _literal(child)
            if word is None or not word.startswith(("-", "+")):
                _sets_word(word if word is None else word.split("=", 1)[0], text, child.start_byte, found)


def _builtin_sets(base: str, arg_nodes: list, text: str, found: Script) -> None:
    """`read X`, `printf -v X`, `mapfile X`, `getopts abc X`, `wait -p X`, `let X=1` set X."""
    args = tuple(_literal(a) for a in arg_nodes)
    start = arg_nodes[0].start_byte if arg_nodes else 0
    if base == "let":
        for arg, node in zip(args, arg_nodes):
            if arg is None:
                found.unreadable.append(f"`{text}`: arithmetic the checker cannot read")
            else:
                _arithmetic(arg, node.start_byte, found, exact=False)
        return
    if base in ("printf", "wait"):
        names = _option_values(args, [_may_be_option(a) for a in arg_nodes], "v" if base == "printf" else "p")
    elif base == "getopts":  # getopts OPTSTRING NAME [ARGS]
        names = list(args[1:2])
    else:  # read, mapfile, readarray: the words that look like names
        names = [a for a in args if a is None or _IDENTIFIER.fullmatch(a.split("[", 1)[0] or "-")]
    for name in names:
        _sets_word(name, text, start, found)


def _sets_word(word: str | None, text: str, start: int, found: Script) -> None:
    """A builtin sets the variable this word names: `x`, or `a[i]`, whose subscript is arithmetic."""
    if word is None:
        _sets(None, False, text, found)
        return
    name, bracket, rest = word.partition("[")
    if bracket:
        _arithmetic(rest.rpartition("]")[0], start, found, exact=False)
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
        _arithmetic(word.partition("[")[2].rpartition("]")[0], node.start_byte, found, exact=False)


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
    body = node.child_by_field_name("body")
    if node.type == "c_style_for_statement":  # `for ((...))`: the text between the parentheses
        start = next((c.end_byte for c in node.children if c.type == "(("), node.start_byte)
        end = next((c.start_byte for c in node.children if c.type == "))"), body.start_byte if body else node.end_byte)
        _arithmetic(node.text[start - node.start_byte: end - node.start_byte].decode(errors="replace"), start, found)
        for first in node.children_by_field_name("initializer"):  # `for ((i = 0; ...))`: i from there on
            value = first.child_by_field_name("value") if first.type == "variable_assignment" else None
            name = first.child_by_field_name("name") if value is not None else None
            if name is not None and name.type == "variable_name" and _INTEGER.fullmatch(_text(value)):
                found.vouched.append((_text(name), first.end_byte, node.end_byte, _in_function(node)))
        return
    name = node.child_by_field_name("variable")
    values = node.children_by_field_name("value")
    literals = [_literal(v) for v in values]
    is_number = (node.children[0].type == "for" and bool(values)
                 and all(v is not None and _INTEGER.fullmatch(v) for v in literals))
    if name is not None:
        _sets(_text(name), is_number, f"{node.children[0].type} {_text(name)}", found)
        if is_number and body is not None:  # `for i in 1 2`: in the body i holds a number
            found.vouched.append((_text(name), body.start_byte, body.end_byte, _in_function(node)))


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
        start = node.children[tokens.index(":")].end_byte
        _arithmetic(node.text[start - node.start_byte: -1].decode(errors="replace"), start, found)


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
    if body is not None:
        found.heredocs.append((body.start_byte, body.end_byte, node.start_byte))
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
        _arithmetic(_text(node), node.start_byte, found)
    elif kind in ("command_substitution", "subshell") and _text(node).startswith(("$((", "((")):
        # The grammar reads `${x:-$((y))}` as `$( (y) )`; bash takes it as arithmetic: read it both ways.
        _arithmetic(_text(node), node.start_byte, found)
    elif kind == "subscript":
        index = node.child_by_field_name("index") or node
        _arithmetic(_text(index), index.start_byte, found)
    elif kind == "array":  # `a=([i]=v)`: the subscript is arithmetic
        for element in node.named_children:
            text = _text(element)
            if text.startswith("["):
                _arithmetic(text[1:].rpartition("]=")[0] or text[1:], element.start_byte + 1, found)
    elif kind == "test_operator" and _text(node) in _ARITH_TESTS and _in_double_brackets(node):
        # `[[ x -eq y ]]` evaluates both sides (`[` and `test` take only numbers)
        test = node.parent
        if test is None or test.type != "binary_expression":  # a shape the checker does not know: all of it
            test = next(n for n in _ancestors(node) if n.type == "test_command")
            _arithmetic(_text(test), test.start_byte, found)
            return
        for side in test.children:
            if (side.start_byte, side.end_byte) != (node.start_byte, node.end_byte):
                _arithmetic(_text(side), side.start_byte, found)


def _ancestors(node) -> Iterator:
    while node is not None:
        yield node
        node = node.parent


def _in_double_brackets(node) -> bool:
    test = next((n for n in _ancestors(node) if n.type == "test_command"), None)
    return test is not None and test.children[0].type == "[["


def _arithmetic(text: str, start: int, found: Script, *, exact: bool = True) -> None:
    # A byte that is not UTF-8 was read as one character: from there the offsets are not the script's.
    found.arithmetic.append(Arithmetic(text, start, exact and "\ufffd" not in text))
    found.expands = True


def _check_arithmetic(arithmetic: Arithmetic, found: Script) -> None:
    """Ask unless every value the text evaluates is one the checker saw set to a literal integer."""
    text = arithmetic.text
    if not _only_plain_expansions(text):
        found.unreadable.append(f"`{text}` evaluates text the checker cannot see as arithmetic")
        return
    if any(q in text for q in "'\""):  # bash removes quotes first: `a"$x"` is `a5`, the variable a5
        text = text.replace("'", "").replace('"', "")
        arithmetic = Arithmetic(text, arithmetic.start, exact=False)
    for match in _ARITH_ASSIGNED.finditer(text):
        name = match.group(1) or match.group(2)
        if any(ch.isupper() for ch in name):
            found.unreadable.append(f"`{text}` changes an environment variable that later commands see")
            return
    if re.search(r"[A-Za-z0-9_]\$", text):  # `a$x`, `a$#`: the value ends a name (a5) bash then reads
        found.unreadable.append(f"`{text}` builds a name at run time that arithmetic reads")
        return
    for match in _ARITH_NAME.finditer(text):
        name = match.group(1)
        if text[match.start() - 1: match.start()] not in ("$", "{") and re.match(r"\s*=(?!=)", text[match.end():]):
            continue  # `x = 1` sets x without reading it (`$x = 1` assigns to what x holds)
        if not _vouched(name, arithmetic.at(match.start()), found):
            found.unreadable.append(f"`{text}` evaluates the value of `{name}` as arithmetic, and the checker"
                                    " cannot vouch that it is a number (a value can run commands there)")
            return


def _only_plain_expansions(text: str) -> bool:
    """No backquote, escape, `~` outside `((...))` (`[[ ~ -eq 1 ]]` reads HOME) or `$` but those
    `_ARITH_EXPANSION` allows."""
    if "`" in text or "\\" in text or ("~" in text and not text.startswith(("$((", "(("))):
        return False
    at = text.find("$")
    while at != -1:
        match = _ARITH_EXPANSION.match(text, at)
        if match is None:
            return False
        at = text.find("$", match.end())
    return True


def _vouched(name: str, at: int, found: Script) -> bool:
    """Whether `name` surely holds a number at byte `at`: set so before it, and nowhere to anything else.
    `_` is the last word of the command before; the environment's values are not seen."""
    if name == "_" or name in found.unvouched or None in found.unvouched:
        return False
    at = next((redirect for start, end, redirect in found.heredocs if start <= at < end), at)
    return any(vouched == name and start <= at < end and not (in_function and any(
        start <= f_start <= at < f_end for f_start, f_end in found.functions))
        for vouched, start, end, in_function in found.vouched)


def _in_function(node) -> bool:
    return any(n.type == "function_definition" for n in _ancestors(node.parent))


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


def bash_network(text: str, policy: Policy) -> bool:
    """Whether `[policy] network` lets an agent's cell keep the network in the OS sandbox: every
    command it runs is one a `Bash(...)` network rule names (what cannot be read never is)."""
    rules = tuple(rule for rule in policy.network if is_bash_rule(rule))
    if not rules:
        return False
    only_network = dataclasses.replace(policy, allow=rules, ask=(), deny=(), admin_deny=(), mode="default",
                                       admin_mode_ceiling=None, read_only=False)
    return decide_bash(text, only_network).action == "allow"


def rule_for_script(text: str) -> str:
    """The rule "always allow" adds for an agent's cell: its one command as a prefix rule."""
    script = analyze(text)
    words = script.parts[0].words if len(script.parts) == 1 else ()
    if script.unreadable or not words or any(w is None for w in words):
        raise ValueError("this cell is not one plain command, so no single rule names it; allow it once, or add"
                         " Bash(...) rules for its commands to [policy] allow in toolkernel.toml")
    return f"{TOOL_NAME}({shlex.join(words)})"


# -- literal commands: host %%bash's before-start check ------------------------


def literal_commands(text: str, name: str) -> list[tuple[str, ...]]:
    """The arguments of each simple command `name` the script writes out in full (every word
    literal), in its order; not those in a function's body, which may never be called. [] for a
    script that does not parse. Advisory: what the script builds at run time is not among them."""
    tree = _parser().parse(text.encode())
    if tree.root_node.has_error:
        return []
    found = []
    for node in _walk(tree.root_node):
        name_node = node.child_by_field_name("name") if node.type == "command" else None
        if name_node is None or _literal(name_node) != name or _in_function_body(node):
            continue
        words = tuple(_literal(a) for a in node.children_by_field_name("argument"))
        if all(w is not None for w in words):
            found.append(words)
    return found


def _in_function_body(node) -> bool:
    while node is not None and node.type != "function_definition":
        node = node.parent
    return node is not None
