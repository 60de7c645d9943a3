"""Bash(...) rules for an agent's %%bash cell: splitting, prefix matching, what cannot be read (pure)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from toolkernel._approval._bash_rules import analyze, decide_bash, rule_covers
from toolkernel._approval._policy import CallInfo, Policy, rule_matches
from toolkernel._config._rules import parse_bash_rule


def action(script: str, allow=(), deny=(), ask=(), mode="default", admin_deny=()) -> str:
    policy = Policy(mode=mode, allow=tuple(allow), deny=tuple(deny), ask=tuple(ask), admin_deny=tuple(admin_deny))
    return decide_bash(script, policy).action


@pytest.mark.parametrize("command, covered", [
    ("git status", True), ("git status --short", True), ("git statusx", False), ("git", False),
    ("git log", False), ("gi't' status", True), ('"git" "status"', True),
])
def test_a_prefix_rule_has_a_word_boundary(command, covered):
    assert (action(command, allow=["Bash(git status)"]) == "allow") is covered


@pytest.mark.parametrize("command, covered", [
    ("git", True), ("git log -p", True), ("gitk", False), ("git $(echo status)", False),
])
def test_a_trailing_star_takes_any_words(command, covered):
    assert (action(command, allow=["Bash(git *)"]) == "allow") is covered


def test_star_alone_takes_one_word_and_inside_a_word_is_a_glob():
    assert rule_covers(parse_bash_rule("Bash(npm * build)"), ("npm", "run", "build"))
    assert not rule_covers(parse_bash_rule("Bash(npm * build)"), ("npm", "run", "test"))
    assert rule_covers(parse_bash_rule("Bash(pytest tests/*)"), ("pytest", "tests/test_x.py"))


@pytest.mark.parametrize("script", [
    "git status && rm -rf x", "git status || rm -rf x", "git status; rm -rf x", "git status | rm -rf x",
    "git status\nrm -rf x", "rm -rf x & git status", "git status $(rm -rf x)", "git status `rm -rf x`",
    "(rm -rf x)", "for f in a; do rm -rf x; done", "f() { rm -rf x; }; git status", "if true; then rm -rf x; fi",
    "cat <<EOF\n$(rm -rf x)\nEOF",
])
def test_every_part_must_be_allowed(script):
    assert action(script, allow=["Bash(git status)", "Bash(cat)", "Bash(true)", "Bash(f)"]) == "ask"
    assert action(script, allow=["Bash(git status)", "Bash(cat)", "Bash(true)", "Bash(f)", "Bash(rm -rf x)"]) == "allow"


@pytest.mark.parametrize("script", [
    'eval "echo hi"', "source ./x.sh", ". ./x.sh", "bash -c 'echo hi'", "sh -c ls", "bash -xc ls",
    "$cmd hi", "exec echo hi", "echo hi > out.txt", "echo hi >> out.txt", "PATH=/tmp/evil; echo hi",
    "if ((", "echo 'unterminated",
])
def test_what_cannot_be_read_asks_whatever_the_allow_rules_say(script):
    assert action(script, allow=["Bash(*)"]) == "ask"
    assert action(script, allow=["Bash(*)"], mode="bypass-permissions") == "ask"


@pytest.mark.parametrize("script", [
    "cp answer.json .toolkernel/pending/3f2a.answer.json", "cp x ./.toolkernel", "tee toolkernel.toml",
    "mv evil.json sub/.mcp.json", "rsync --dest=.toolkernel/ x", "cat .toolkernel/approvals.json",
])
def test_a_word_naming_toolkernels_state_or_config_asks(script):
    # An answer file under .toolkernel/pending/ is a person's approval: an agent's cell that
    # names it is put to a person even where its command is allowed.
    assert action(script, allow=["Bash(*)"], mode="bypass-permissions") == "ask"
    assert action("cp notes.md toolkernel.md .toolkernel-old/", allow=["Bash(*)"]) == "allow"


def test_harmless_redirections_and_local_variables_are_read():
    assert action("ls 2>&1 > /dev/null; x=1; echo $x < in.txt", allow=["Bash(ls)", "Bash(echo *)"]) == "allow"


@pytest.mark.parametrize("script", ["rm -rf /", "echo hi; rm x", "sudo rm -rf /", "/bin/rm x",
                                    "xargs -0 rm", "timeout 5 rm x", "env A=1 rm x"])
def test_deny_rules_see_through_paths_and_wrappers(script):
    assert action(script, allow=["Bash(*)"], deny=["Bash(rm *)"]) == "deny"
    assert action(script, allow=["Bash(*)"], admin_deny=["Bash(rm *)"]) == "deny"


def test_modes_and_ask_rules():
    assert action("git status", allow=["Bash(git *)"], mode="plan") == "deny"
    assert action("make build", mode="bypass-permissions") == "allow"
    assert action("make build", mode="accept-edits") == "ask"
    assert action("git push", allow=["Bash(git *)"], ask=["Bash(git push)"]) == "ask"
    assert action("# only a comment\n") == "allow"


def test_bash_rules_load_with_the_policy_and_never_match_a_tool():
    policy = Policy.from_config({"allow": ["Bash(git *)"], "deny": ["bash(rm *)"]}, None)
    assert policy.allow == ("Bash(git *)",)
    tool = CallInfo("bash", "tools bash", {}, "execute")
    assert not rule_matches("Bash(git *)", tool) and not rule_matches("Bash(*)", tool)
    for bad in ("Bash()", "Bash('unterminated)"):
        with pytest.raises(ValueError):
            Policy.from_config({"allow": [bad]}, None)


def test_the_parts_are_the_simple_commands():
    parts = [p.words for p in analyze("FOO=1 git status && echo $(whoami) | tee f").parts]
    assert parts == [("FOO=1", "git", "status"), ("echo", None), ("whoami",), ("tee", "f")]


def test_always_allowing_an_agents_cell_names_its_one_command():
    from toolkernel._approval._approvals import rule_for

    cell = lambda text: CallInfo("Bash", "Bash", {"command": text}, "execute")  # noqa: E731
    assert rule_for(cell("git push origin 'my branch'\n")) == "Bash(git push origin 'my branch')"
    assert action("git push origin 'my branch'", allow=[rule_for(cell("git push origin 'my branch'"))]) == "allow"
    for text in ("git add . && git commit", "eval x", "$cmd"):
        with pytest.raises(ValueError, match="not one plain command"):
            rule_for(cell(text))


# -- what bash runs beyond the words: each script below is allowed by `echo`/`cat`/`read`/... rules
# on its words alone, yet bash runs `touch` (or sets PATH); the test first shows that real bash does.

ONLY_ECHO_AND_FRIENDS = ("Bash(echo *)", "Bash(cat)", "Bash(read *)", "Bash(printf *)", "Bash(mapfile *)",
                         "Bash(readarray *)", "Bash(getopts *)", "Bash(let *)", "Bash(export *)",
                         "Bash(declare *)", "Bash(local *)", "Bash(unset *)", "Bash(f)", "Bash(x)",
                         "Bash(true)", "Bash(:)", "Bash(test *)")

RUNS_A_HIDDEN_COMMAND = [
    "x='$(touch MARK)'; echo ${x@P}",                       # a value expanded as a prompt
    "cat <<EOF\n`touch MARK`\nEOF",                         # backquotes in an unquoted here-document
    "cat <<-EOF\n\t`touch MARK`\n\tEOF",
    "echo ${x:-`touch MARK`}",                              # backquotes the grammar leaves as a word
    "x='a[$(touch MARK)]'; echo $((x))",                    # arithmetic evaluates a value as code
    "x='a[$(touch MARK)]'; echo $(( $x + 1 ))",
    "x='a[$(touch MARK)]'; declare -a a; echo ${a[x]}",
    "x='a[$(touch MARK)]'; v=abc; echo ${v:x}",
    "x='a[$(touch MARK)]'; [[ $x -eq 0 ]]",
    "read x <<<'a[$(touch MARK)]'; echo $((x))",
    "read <<<'a[$(touch MARK)]'; echo $((REPLY))",
    "f() { echo $(($1)); }; f 'a[$(touch MARK)]'",
    "x='a[$(touch MARK)]'; echo ${!x}",                     # an indirect name with a subscript
    "[[ -v 'a[$(touch MARK)]' ]]", "test -v 'a[$(touch MARK)]'", "y='a[$(touch MARK)]'; [[ -v $y ]]",
    "printf -v 'a[$(touch MARK)]' %s x", "read 'a[$(touch MARK)]' <<<x", "declare 'a[$(touch MARK)]=1'",
    "x=abc; echo ${x/`touch MARK`/y}", "[[ a =~ `touch MARK` ]]",
]

SETS_PATH = [
    "printf -v PATH %s /nowhere", "printf -vPATH %s /nowhere", "read PATH <<<'/nowhere'",
    "read -r PATH <<<'/nowhere'", "mapfile PATH <<<'/nowhere'", "readarray -t PATH <<<'/nowhere'",
    "declare PATH=/nowhere", "export PATH=/nowhere", "f() { local PATH=/nowhere; x; }; f",
    "let PATH=1", "getopts a: PATH -a", "((PATH=1))", "echo $((PATH=1))",
    "for PATH in /nowhere; do x; done", "for ((PATH=1; PATH<2; PATH++)); do x; done", "unset PATH",
    "declare -n p=PATH; p=/nowhere", "x='PATH=1'; echo $((x))", "echo $(( PAT\"H\"=1 ))",
]


def _run_bash(script: str, folder) -> tuple[bool, str]:
    """Whether real bash ran `touch MARK`, and every PATH that `x` saw."""
    import subprocess

    prelude = 'x() { printf "%s\\n" "$PATH" >> path.out; }\n'  # how the script's later commands see PATH
    subprocess.run(["bash", "-c", prelude + script + "\nx"], cwd=folder, capture_output=True, timeout=60, check=False)
    return (folder / "MARK").exists(), (folder / "path.out").read_text().splitlines()


@pytest.mark.parametrize("script", RUNS_A_HIDDEN_COMMAND)
def test_a_command_bash_runs_beyond_the_words_asks(script, tmp_path):
    assert _run_bash(script, tmp_path)[0], "the script must really run touch"
    assert action(script, allow=ONLY_ECHO_AND_FRIENDS) == "ask"
    assert action(script, allow=["Bash(*)"], mode="bypass-permissions") == "ask"


@pytest.mark.parametrize("script", SETS_PATH)
def test_setting_path_without_an_assignment_asks(script, tmp_path):
    assert set(_run_bash(script, tmp_path)[1]) != {os.environ["PATH"]}, "the script must really change PATH"
    assert action(script, allow=ONLY_ECHO_AND_FRIENDS) == "ask"
    assert action(script, allow=["Bash(*)"], mode="bypass-permissions") == "ask"


@pytest.mark.parametrize("script", [
    "trap 'rm -rf x' EXIT", "trap -- 'rm -rf x' EXIT", "alias ls='rm -rf x'", "mapfile -C 'rm -rf x' -c 1 y",
    "hash -p /bin/rm ls", "jobs -x rm -rf x", "command jobs -x rm -rf x", "coproc rm -rf x", "ls {PATH}>&1",
    "wait -n -p PATH", "printf \"$opt\" '%s' x",
    "echo ${LD_PRELOAD:=/nowhere/x.so}",
])
def test_commands_that_run_or_redirect_text_later_ask(script):
    assert action(script, allow=["Bash(*)"], mode="bypass-permissions") == "ask"


@pytest.mark.parametrize("script", ["echo hi > 2", "echo hi >> 1", "echo hi > -", "echo hi >& out", "echo hi &> 2"])
def test_a_redirection_to_a_number_is_a_file(script, tmp_path):
    import subprocess

    subprocess.run(["bash", "-c", script], cwd=tmp_path, check=True, timeout=60)
    assert list(tmp_path.iterdir()), "bash writes a file"
    assert action(script, allow=["Bash(echo *)"]) == "ask"


def test_deny_rules_see_past_variable_assignments():
    assert action("a=1 rm -rf x", allow=["Bash(*)"], deny=["Bash(rm *)"]) == "deny"
    assert action("a=$(x) /bin/rm -rf x", allow=["Bash(*)"], deny=["Bash(rm *)"]) == "deny"


@pytest.mark.parametrize("script", [
    "cat <<'EOF'\n`id` $(id) $((x)) ${x@P}\nEOF", 'cat <<"EOF"\n`id`\nEOF', "cat <<\\EOF\n`id`\nEOF",
    "cat <<EOF\nHello $x, \\`literal\\` \\$(literal)\nEOF", "ls 2>&1 >&2 3>&1- >&- < in.txt",
    "x=5; echo $((x * 2)) ${v:x:2}", "for i in 1 2 3; do echo $((i + 1)); done", "i=0; ((i++)); echo ${a[i]}",
    'printf "%s\\n" "$x"', 'printf "$msg"', "read -r line; echo \"$line\"", "mapfile -t lines",
    "echo ${x@E} ${x@Q} ${#x} ${x^^} ${!pre*} ${!arr[@]}", "trap - EXIT", "echo $(( $# + $? ))",
    "x=$(cat f); [ \"$x\" -eq 1 ] && echo one", "echo \"a\\`b\" $'`x`' '$(x)'",
])
def test_what_bash_runs_as_written_is_still_read(script):
    assert action(script, allow=ONLY_ECHO_AND_FRIENDS + ("Bash(ls)", "Bash([ *)", "Bash(trap *)")) == "allow"


# -- issue 34, item 3: values the checker cannot see, evaluated as arithmetic -----------------------
# Each cell below is allowed by the rules named on its words alone, yet real bash runs `touch MARK`:
# arithmetic evaluates the text of a value bash or the environment filled, and a subscript in that
# text (`a[$(...)]`) runs a command. The test first shows that real bash does.

PAYLOAD = "a[$(touch MARK)]"  # 16 characters
_AT = "[[ ${BASH_COMMAND:NN:16} -eq 1 || -n 'a[$(touch MARK)]' ]]"
IN_BASH_COMMAND = _AT.replace("NN", str(_AT.index(PAYLOAD)))
_ECHO = "echo $(( ${BASH_COMMAND:NN:16} )) 'a[$(touch MARK)]'"
ECHOES_BASH_COMMAND = _ECHO.replace("NN", str(_ECHO.index(PAYLOAD)))

UNSEEN_VALUE_ATTACKS = [
    (IN_BASH_COMMAND, ()),                                       # nothing to run, no rule at all
    (IN_BASH_COMMAND, ("Bash(echo *)",)),
    (ECHOES_BASH_COMMAND, ("Bash(echo *)",)),
    ("cd 'a[$(touch MARK)]'; echo $(( ${PWD##*/} ))", ("Bash(cd *)", "Bash(echo *)")),  # a folder's name
    ("cd 'a[$(touch MARK)]' && [[ ${PWD##*/} -eq 0 ]]", ("Bash(cd *)",)),
    ("cd 'a[$(touch MARK)]' && v=abc && echo ${v:${PWD##*/}}", ("Bash(cd *)", "Bash(echo *)")),
    # `read` behind `time`: x=1 no longer holds
    ("x=1; time read -r x <<<'a[$(touch MARK)]'; echo $((x))", ("Bash(time *)", "Bash(echo *)")),
    ("x=1; f() { echo $((x)); }; x='a[$(touch MARK)]' f", ("Bash(*)",)),  # a value for one command
    ("x='a[$(touch MARK)]'; a=([x]=1); echo", ("Bash(echo *)",)),  # a subscript in `( )`
    ("if false; then x=1; fi; echo $((x))", ("Bash(echo *)",)),  # x from the environment
    ("x=1 & echo $((x))", ("Bash(echo *)",)),                   # x=1 ran in a background subshell
    ("local x=1; echo $((x))", ("Bash(echo *)",)),              # `local` outside a function fails
    ("x=1; command read -r x <<<'a[$(touch MARK)]'; echo $((x))", ("Bash(command *)", "Bash(echo *)")),
    ("echo $(( $!x ))", ("Bash(echo *)",)),                     # no background job: `$!` is empty
    ("echo $(( $x = 1 ))", ("Bash(echo *)",)),                  # assigns to the subscript x holds
    ("y=1; [[ $y -eq 1 && x -eq 1 ]]; echo", ("Bash(echo *)",)),  # a bare name in [[ -eq ]]
    # a function defined where a local was set is called after it is gone
    ("f() { local x=1; g() { echo $((x)); }; }; f; g", ("Bash(local *)", "Bash(f)", "Bash(g)", "Bash(echo *)")),
    ("f() { local x=5; for x in 1 2; do g() { echo $((x)); }; done; }; f; g",
     ("Bash(local *)", "Bash(f)", "Bash(g)", "Bash(echo *)")),
    # the grammar reads both lines as one command, `for` with subshells: the header's arithmetic unseen
    ("x=1 y=2\nfor ((i='a[$(touch MARK)]'; i<1; i++)); do echo; done", ("Bash(*)",)),
    ("v=1; echo ${v:+$((x))}", ("Bash(*)",)),  # the grammar reads `$((x))` here as `$( (x) )`, command x
]


def test_single_brackets_and_test_take_only_numbers(tmp_path):
    # Unlike [[ ]], `[` and `test` do not evaluate their operands, so these stay allowed.
    script = '[ "$x" -eq 1 ]; test "$x" -lt 1; [ x -gt 1 ]; echo'
    assert not _run_in_bash(script, tmp_path)
    assert action(script, allow=["Bash([ *)", "Bash(test *)", "Bash(echo *)"]) == "allow"


@pytest.mark.parametrize("script", [
    "for ((i=0; i<3; i++)); do echo ${a[i]}; done", "n=3; for ((i=0; i<n; i++)); do echo $((i * n)); done",
    "f() { local x=1; echo $((x)); }; f", "n=2; f() { echo $((n)); }; f", "x=1; [[ \"$x\" -lt 2 && $x == 1 ]]; echo",
    "arr=(a b); echo $(( ${#arr[@]} - 1 ))", "s=abc; x=1; echo ${s: -1} ${s:x:x} ${s:(x)}", "x=1; a=([x]=2); echo",
    "echo $((16#ff + 0x1f + 64#a@b)) $((x = 1))",
])
def test_arithmetic_over_numbers_the_cell_set_is_still_read(script):
    assert action(script, allow=["Bash(echo *)", "Bash(f)", "Bash(local *)"]) == "allow"


@pytest.mark.parametrize("script", ["x=1; ((x++))", "[[ ${x:-0} -eq 0 ]]", "y=$PWD", "x=${y:-1}"])
def test_a_cell_that_only_expands_asks(script):
    assert action(script, allow=["Bash(:)"]) == "ask"
    assert action("x=1; [[ -f y ]]") == "allow"  # nothing expanded, nothing to run


def _run_in_bash(script: str, folder) -> bool:
    """Whether real bash, in `folder` (which holds a folder named PAYLOAD) with x=PAYLOAD in its
    environment, runs `touch MARK` anywhere below it."""
    import subprocess

    (folder / PAYLOAD).mkdir(exist_ok=True)
    env = {**os.environ, "x": PAYLOAD, "y": PAYLOAD}
    subprocess.run(["bash", "-c", script], cwd=folder, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                   timeout=60, check=False)
    return any(folder.rglob("MARK"))


@pytest.mark.parametrize("script, allow", UNSEEN_VALUE_ATTACKS)
def test_arithmetic_over_a_value_the_checker_cannot_see_asks(script, allow, tmp_path):
    assert _run_in_bash(script, tmp_path), "the script must really run touch"
    assert action(script, allow=allow) == "ask"
    assert action(script, allow=["Bash(*)"], mode="bypass-permissions") == "ask"


# A property: cells drawn from bash's arithmetic contexts, with the payload hidden in variable values,
# the environment, input, a folder's name (`$PWD`), positional parameters and BASH_COMMAND, run in real
# bash. Whatever the checker allows must not run `touch MARK`. (Fixed seed; a bash run costs ~10 ms.)

HIDINGS = [
    "", "x='a[$(touch MARK)]'", "x=1", "x=5", "read -r x <<<'a[$(touch MARK)]'", "read <<<'a[$(touch MARK)]'",
    "printf -v x %s 'a[$(touch MARK)]'", "declare x='a[$(touch MARK)]'", "cd 'a[$(touch MARK)]'",
    "if false; then x=1; fi", "x=1 &", "(x=1)", "x=1 true", "unset x", "export x", "for x in 1; do :; done",
    "set -- 'a[$(touch MARK)]'", "time read -r x <<<'a[$(touch MARK)]'", "command read -r x <<<'a[$(touch MARK)]'",
    "builtin printf -v x %s 'a[$(touch MARK)]'", "y=x", "y=1", "echo 'a[$(touch MARK)]'", "x=1 y=2", "i=0",
    "f() { x='a[$(touch MARK)]'; }; f", "mapfile -t x <<<'a[$(touch MARK)]'", "a=('a[$(touch MARK)]')",
]
VALUES = [
    "x", "$x", "${x}", "${#x}", "y", "$y", "x+y", "i", "a", "a[0]", "PWD", "$PWD", "${PWD##*/}", "${PWD:-1}",
    "BASH_COMMAND", "${BASH_COMMAND:@@:16}", "$1", "${1}", "$@", "REPLY", "$REPLY", "_", "$_", "$!x", "$-",
    "OLDPWD", "FUNCNAME", "BASH_ARGV", "1", "0x1f", "16#ff", "x=1", "x = 1, x", "x += 1", "${x:-0}", "${x:0:16}",
    "'a[$(touch MARK)]'", "$(echo 'a[$(touch MARK)]')", "a[$(touch MARK)]",
]
CONTEXTS = [  # «» is the drawn value; each carries the payload in its own text, for BASH_COMMAND
    "echo $(( «» )) 'a[$(touch MARK)]'", "(( «» )) || echo 'a[$(touch MARK)]'",
    "true $(( «» )) 'a[$(touch MARK)]'", "[[ «» -eq 1 || -n 'a[$(touch MARK)]' ]]",
    "[[ 1 -lt «» || -n 'a[$(touch MARK)]' ]]", "v=abc; echo ${v:«»} 'a[$(touch MARK)]'",
    "v=abc; echo ${v:0:«»} 'a[$(touch MARK)]'", "echo ${a[«»]} 'a[$(touch MARK)]'",
    "a[«»]=1; echo 'a[$(touch MARK)]'", "let \"y=«»\" || echo 'a[$(touch MARK)]'",
    "for ((i=«»; i<1; i++)); do echo 'a[$(touch MARK)]'; done", "a=([«»]=1); echo 'a[$(touch MARK)]'",
    "for i in 1; do echo $(( «» )) 'a[$(touch MARK)]'; done",
    "f() { echo $(( «» )) 'a[$(touch MARK)]'; }; f 'a[$(touch MARK)]'",
    "printf -v 'y[«»]' %s 1; echo 'a[$(touch MARK)]'", "[[ -v a[«»] || -n 'a[$(touch MARK)]' ]]",
    "f() { local x=1; g() { echo $(( «» )) 'a[$(touch MARK)]'; }; }; f; g", "v=abc; cat <<EOF\n${v:«»}\nEOF",
    "f() { local x=1; echo $(( «» )) 'a[$(touch MARK)]'; }; f", "x=1 y=2; echo $(( «» )) 'a[$(touch MARK)]'",
    "v=1; echo ${v:+$(( «» ))} 'a[$(touch MARK)]'", "echo \"${v:-$(( «» ))}\" 'a[$(touch MARK)]'",
]
RULE_SETS = [
    (), ("Bash(echo *)", "Bash(cd *)", "Bash(true)", "Bash(:)", "Bash(f)", "Bash(read *)", "Bash(printf *)",
         "Bash(let *)", "Bash(declare *)", "Bash(export *)", "Bash(unset *)", "Bash(set *)", "Bash(time *)",
         "Bash(command *)", "Bash(builtin *)", "Bash(mapfile *)", "Bash(local *)", "Bash(g)", "Bash(cat)"),
]


def _cell(hidings: list[str], value: str, context: str) -> str:
    line = context.replace("«»", value)
    line = line.replace("@@", str(line.find(PAYLOAD)) if PAYLOAD in line else "0")
    return "\n".join([*filter(None, hidings), line])


@settings(max_examples=int(os.environ.get("TOOLKERNEL_BASH_RULES_EXAMPLES", "300")), deadline=None,
          database=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(hidings=st.lists(st.sampled_from(HIDINGS), max_size=3), value=st.sampled_from(VALUES),
       context=st.sampled_from(CONTEXTS))
def test_a_cell_the_checker_allows_never_runs_a_hidden_command(hidings, value, context):
    import tempfile
    from pathlib import Path

    script = _cell(hidings, value, context)
    allowed = [rules for rules in RULE_SETS if action(script, allow=rules) == "allow"]
    if action(script, allow=["Bash(*)"], mode="bypass-permissions") == "allow":
        allowed.append("bypass")
    event(f"allowed under {len(allowed)} of 3")
    if allowed:  # bash runs only what the checker allows: most draws ask (the plain tests show they run)
        with tempfile.TemporaryDirectory() as folder:
            assert not _run_in_bash(script, Path(folder)), f"allowed under {allowed}, yet bash ran touch:\n{script}"
