"""Bash(...) rules for an agent's %%bash cell: splitting, prefix matching, what cannot be read (pure)."""

from __future__ import annotations

import os

import pytest

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
    "declare -n p=PATH; p=/nowhere", "x='PATH=1'; echo $((x))",
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
    "hash -p /bin/rm ls", "coproc rm -rf x", "ls {PATH}>&1", "wait -n -p PATH", "printf \"$opt\" '%s' x",
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
