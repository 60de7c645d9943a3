"""A catalogue of attempts to get a call that asks past the approval layer.

`tools github delete-branch` (destructive) asks in the default mode. Every
attempt below runs in a real Bashkit shell against a real MCP server (the
recorder fixture, which appends a line to a file for every call it really
makes) and must end with the call NOT made: the file stays empty.

So that no attempt passes for a trivial reason (a typo, a construct the shell
does not support), each one also runs in a project that allows the tool:
there the very same script must reach the server. An attempt that cannot
reach the tool even when it is allowed is listed in UNREACHABLE with why.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from toolkernel._approval._policy import canonical_call_key
from toolkernel._session import Session

from approval_helpers import (
    CollectingSink, Kernel, error_codes, kernel_env, policy_section, recorded_calls,
    recorder_server_section, write_project,
)

pytestmark = pytest.mark.timeout(600)

CALL = "tools github delete-branch branch=fix-x"
B64 = base64.b64encode(f"{CALL}\n".encode()).decode()

ATTEMPTS = {
    "literal": CALL,
    "input-from-variable": "b=fix-x; tools github delete-branch branch=$b",
    "eval": f"eval '{CALL}'",
    "eval-built-string": "a='tools github'; b='delete-branch branch=fix-x'; eval \"$a $b\"",
    "command-substitution": f'out=$({CALL}); echo "got: $out"',
    "backticks": f'out=`{CALL}`; echo "got: $out"',
    "function": f"f() {{ {CALL}; }}\nf",
    "function-with-argument": "f() { tools github delete-branch \"branch=$1\"; }\nf fix-x",
    "alias": "shopt -s expand_aliases\nalias del='tools github delete-branch'\ndel branch=fix-x",
    "command-builtin": f"command {CALL}",
    "builtin-builtin": f"builtin {CALL}",
    "here-doc": "tools github delete-branch - <<'EOF'\n{\"branch\": \"fix-x\"}\nEOF",
    "here-doc-no-dash": "tools github delete-branch <<'EOF'\n{\"branch\": \"fix-x\"}\nEOF",
    "here-string": "tools github delete-branch <<< '{\"branch\": \"fix-x\"}'",
    "stdin-pipe": "echo '{\"branch\": \"fix-x\"}' | tools github delete-branch",
    "stdin-dash": "echo '{\"branch\": \"fix-x\"}' | tools github delete-branch -",
    "xargs": "echo branch=fix-x | xargs tools github delete-branch",
    "xargs-replace": "echo fix-x | xargs -I{} tools github delete-branch branch={}",
    "source-written-file": f"echo '{CALL}' > step.sh\nsource step.sh",
    "dot-written-file": f"echo '{CALL}' > step.sh\n. step.sh",
    "background-and-wait": f"{CALL} &\nwait",
    "subshell": f"( {CALL} )",
    "brace-group": f"{{ {CALL}; }}",
    "base64-to-bash": f"echo {B64} | base64 -d | bash",
    "base64-to-sh": f"echo {B64} | base64 -d | sh",
    "base64-to-eval": f'eval "$(echo {B64} | base64 -d)"',
    "bash-c": f"bash -c '{CALL}'",
    "sh-c": f"sh -c '{CALL}'",
    "tool-name-in-variable": "t=delete-branch; tools github $t branch=fix-x",
    "server-name-in-variable": "s=github; tools $s delete-branch branch=fix-x",
    "whole-command-in-variable": f'cmd="{CALL}"; $cmd',
    "command-name-from-substitution": "$(echo tools) github delete-branch branch=fix-x",
    "quoted-command-name": "'tools' github delete-branch branch=fix-x",
    "escaped-command-name": "\\tools github delete-branch branch=fix-x",
    "qualified-name": "tools mcp_github__delete_branch branch=fix-x",
    "double-underscore-qualified-name": "tools mcp__github__delete_branch branch=fix-x",
    "underscore-spelling": "tools github delete_branch branch=fix-x",
    "uppercase-spelling": "tools github DELETE-BRANCH branch=fix-x",
    "uppercase-server": "tools GITHUB delete-branch branch=fix-x",
    "json-argument": "tools github delete-branch '{\"branch\": \"fix-x\"}'",
    "option-form": "tools github delete-branch --branch fix-x",
    "exec": f"exec {CALL}",
    "trap-exit": f"trap '{CALL}' EXIT\necho armed",
    "for-loop": "for b in fix-x; do tools github delete-branch branch=$b; done",
    "while-read-loop": "printf 'fix-x\\n' | while read b; do tools github delete-branch branch=$b; done",
    "env-prefix": f"env {CALL}",
    "assignment-prefix": f"X=1 {CALL}",
    "timeout": f"timeout 5 {CALL}",
    "errors-silenced": f"{CALL} 2>/dev/null || true\necho carried on",
    "middle-of-pipeline": f"echo x | {CALL} | cat",
    "after-a-read-only-call": f"tools github list-pulls repo=acme/api > /dev/null\n{CALL}",
    "after-many-read-only-calls": "for i in $(seq 1 10); do tools github list-pulls repo=acme/api > /dev/null; done\n"
                                  f"{CALL}",
}

# Each of these reaches the server when the tool is allowed, except these, which
# fail with the error code given. (Names fold case, so the uppercase spellings reach it.)
UNREACHABLE: dict[str, str] = {}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """One project with the recorder as `github`; a session on it that asks (default mode)."""
    root = tmp_path_factory.mktemp("bypass")
    record = root / "record.jsonl"
    asking = root / "asking"
    write_project(asking, recorder_server_section(record))
    allowing = root / "allowing"
    write_project(allowing, recorder_server_section(record),
                  policy_section(allow=["mcp_github__delete_branch"]))
    sessions = {"asking": Session(asking), "allowing": Session(allowing)}
    yield sessions, record
    for session in sessions.values():
        session.close()


@pytest.fixture(autouse=True)
def isolated_config(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TOOLKERNEL_ADMIN_CONFIG", str(tmp_path / "no-admin.toml"))


def run(session: Session, script: str):
    sink = CollectingSink()
    result = session.run_script(script, sink)
    return result, "".join(sink.err)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ATTEMPTS))
def test_attempt_does_not_make_the_call(project, name):
    sessions, record = project
    record.unlink(missing_ok=True)
    result, stderr = run(sessions["asking"], ATTEMPTS[name])
    made = recorded_calls(record)
    record.unlink(missing_ok=True)
    assert made == [], f"{name}: the call was made without approval; stderr: {stderr}"
    if name in UNREACHABLE:
        assert UNREACHABLE[name] in error_codes(stderr), stderr
        return
    stopped = (result.report or {}).get("tools", {}).get("stopped") or {}
    assert stopped.get("reason") == "needs_approval" or "needs_approval" in error_codes(stderr), \
        f"{name}: not made, but nobody was asked either: exit {result.exit_code}, stderr {stderr!r}"


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in ATTEMPTS if n not in UNREACHABLE])
def test_attempt_reaches_the_tool_when_allowed(project, name):
    """The control: the same script is a real call, made once the tool is allowed."""
    sessions, record = project
    record.unlink(missing_ok=True)
    result, stderr = run(sessions["allowing"], ATTEMPTS[name])
    made = recorded_calls(record)
    record.unlink(missing_ok=True)
    assert made and made[0] == {"tool": "delete_branch", "input": {"branch": "fix-x"}}, \
        f"{name}: the allowed call did not reach the server: exit {result.exit_code}, stderr {stderr!r}"


# -- approvals and rules that cover something else ----------------------------------------


def session_on(root: Path, record: Path, *sections: str) -> Session:
    return Session(write_project(root, recorder_server_section(record), *sections).parent)


@pytest.fixture
def record(tmp_path) -> Path:
    return tmp_path / "record.jsonl"


def made_by(session: Session, record: Path, script: str) -> tuple[list, str]:
    try:
        result, stderr = run(session, script)
    finally:
        session.close()
    return recorded_calls(record), stderr


@pytest.mark.slow
def test_a_one_off_approval_covers_one_call_not_two(tmp_path, record):
    session = session_on(tmp_path / "p", record)
    session.approvals.grant_once(canonical_call_key("mcp_github__delete_branch", {"branch": "fix-x"}))
    made, stderr = made_by(session, record, "for i in 1 2 3; do b=fix-x; tools github delete-branch branch=$b; done")
    assert made == [{"tool": "delete_branch", "input": {"branch": "fix-x"}}]
    assert "needs_approval" in error_codes(stderr)


@pytest.mark.slow
def test_a_one_off_approval_does_not_cover_another_input(tmp_path, record):
    session = session_on(tmp_path / "p", record)
    session.approvals.grant_once(canonical_call_key("mcp_github__delete_branch", {"branch": "wip-auth"}))
    made, stderr = made_by(session, record, "b=fix-x; tools github delete-branch branch=$b")
    assert made == [] and "needs_approval" in error_codes(stderr)


@pytest.mark.slow
def test_a_one_off_approval_does_not_cover_extra_input(tmp_path, record):
    session = session_on(tmp_path / "p", record)
    session.approvals.grant_once(canonical_call_key("mcp_github__delete_branch", {"branch": "fix-x"}))
    made, stderr = made_by(session, record, "b=fix-x; tools github delete-branch branch=$b force=true")
    assert made == [] and "needs_approval" in error_codes(stderr), stderr


@pytest.mark.slow
def test_an_input_constrained_allow_covers_only_that_input(tmp_path, record):
    session = session_on(tmp_path / "p", record, policy_section(allow=["github delete-branch(branch=wip-*)"]))
    made, stderr = made_by(session, record, "for b in wip-auth fix-x; do tools github delete-branch branch=$b; done")
    assert made == [{"tool": "delete_branch", "input": {"branch": "wip-auth"}}]
    assert "needs_approval" in error_codes(stderr)


@pytest.mark.slow
def test_always_allowing_one_tool_does_not_allow_another(tmp_path, record):
    session = session_on(tmp_path / "p", record)
    session.approvals.always_allow("mcp_github__create_issue")
    made, stderr = made_by(session, record, 'tools github create-issue "title=ok"\n'
                                            "b=fix-x; tools github delete-branch branch=$b")
    assert made == [{"tool": "create_issue", "input": {"title": "ok"}}]
    assert "needs_approval" in error_codes(stderr)


@pytest.mark.slow
@pytest.mark.parametrize("rule", [
    "mcp_github__delete_branch", "mcp_github__delete-branch", "mcp__github__delete_branch",
    "github delete_branch", "github delete-branch", "github  delete-branch", "github *", "mcp_github__*",
    "github delete-*", "*", "mcp_github__delete_branch(branch=fix-x)", "github delete-branch(branch=*)",
])
def test_a_deny_rule_in_any_spelling_denies_even_in_bypass_mode(tmp_path, record, rule):
    session = session_on(tmp_path / "p", record, policy_section(mode="bypass-permissions", deny=[rule]))
    made, stderr = made_by(session, record, "b=fix-x; tools github delete-branch branch=$b")
    assert made == [] and error_codes(stderr) == ["denied"], stderr


@pytest.mark.slow
def test_the_bypass_mode_control_makes_the_call(tmp_path, record):
    session = session_on(tmp_path / "p", record, policy_section(mode="bypass-permissions"))
    made, _ = made_by(session, record, "b=fix-x; tools github delete-branch branch=$b")
    assert made == [{"tool": "delete_branch", "input": {"branch": "fix-x"}}]


# -- through a real kernel: the magics and the Python API ----------------------------------

KERNEL_ATTEMPTS = [
    f"%%tools\neval \"$(echo {B64} | base64 -d)\"",
    f"%%tools\necho {B64} | base64 -d | bash",
    "%%tools\nf() { tools github delete-branch \"branch=$1\"; }\nf fix-x",
    "%tools github delete-branch branch=fix-x",
    "%tools mcp__github__delete_branch '{\"branch\": \"fix-x\"}'",
    "import toolkernel\ntoolkernel.call('github', 'delete-branch', input={'branch': 'fix-x'})",
    "import toolkernel\ntoolkernel.call('mcp_github__delete_branch', branch='fix-x')",
    "import toolkernel\nr = toolkernel.run('b=fix-x; tools github delete-branch branch=$b')\n"
    "assert r.exit_code != 0, r",
    "import toolkernel\nr = toolkernel.get_session().run_script("
    "'for b in fix-x; do tools github delete-branch branch=$b; done', __import__('toolkernel._frontends._cli_sink', "
    "fromlist=['PrintSink']).PrintSink())\nassert r.exit_code != 0",
]


@pytest.mark.slow
def test_attempts_through_a_kernel_do_not_make_the_call(tmp_path):
    record = tmp_path / "record.jsonl"
    workdir = write_project(tmp_path / "project", recorder_server_section(record)).parent
    kernel = Kernel(workdir, kernel_env(workdir))
    try:
        for code in KERNEL_ATTEMPTS:
            cell = kernel.run(code)
            assert recorded_calls(record) == [], f"made by {code!r}: {cell}"
            shown = cell.stdout + cell.stderr + json.dumps(cell.error) + json.dumps(cell.displays)
            assert "needs_approval" in shown or "NeedsApproval" in shown, f"{code!r} was not asked about: {cell}"
        # The control: after `%tools approve` the last asking call is made, once.
        assert kernel.run("%tools approve").ok
        assert kernel.run("%tools github delete-branch branch=fix-x").ok
        assert recorded_calls(record) == [{"tool": "delete_branch", "input": {"branch": "fix-x"}}]
    finally:
        kernel.close()


# -- nothing after the stop runs, however the script tries to go on -------------------------

ASKS = "b=fix-x; tools github delete-branch branch=$b"
AFTER_THE_STOP = {
    "or-true": f"{ASKS} || true\necho ran > after.txt",
    "command-substitution": f'x=$({ASKS}); echo "$x" > after.txt',
    "inside-a-subshell": f"( {ASKS}; echo ran > after.txt )\necho ran > after.txt",
    "pipeline": f"{ASKS} | while read l; do echo $l; done; echo ran > after.txt",
    "trap-err": f"trap 'echo ran > after.txt' ERR\n{ASKS}",
    "trap-exit": f"trap 'echo ran > after.txt' EXIT\n{ASKS}",
    "background": f"{ASKS} &\nwait\necho ran > after.txt",
    "rest-of-a-function": f"f() {{ {ASKS}; echo ran > after.txt; }}\nf",
    "rest-of-an-eval": f"eval '{ASKS}; echo ran > after.txt'",
    "rest-of-bash-c": f"bash -c '{ASKS}; echo ran > after.txt'",
    "next-tools-call": f"{ASKS}; tools github create-issue title=after",
    "next-xargs-item": "printf 'fix-x\\nwip-auth\\n' | xargs -I{} tools github delete-branch branch={}",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(AFTER_THE_STOP))
def test_nothing_after_the_stop_runs(tmp_path, record, name):
    session = session_on(tmp_path / "p", record, policy_section(allow=["mcp_github__create_issue"]))
    try:
        result, stderr = run(session, AFTER_THE_STOP[name])
    finally:
        session.close()
    assert recorded_calls(record) == []
    assert not (tmp_path / "p" / "after.txt").exists(), f"{name}: a command after the stop ran"
    assert result.exit_code != 0 and result.report["tools"]["stopped"]["reason"] == "needs_approval"
    assert result.report["tools"]["stopped"]["call"]["input"] == {"branch": "fix-x"}


# -- modes and annotations ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("mode, code", [("default", "needs_approval"), ("accept-edits", "needs_approval"),
                                        ("plan", "denied")])
def test_modes_short_of_bypass_never_make_the_call_unasked(tmp_path, record, mode, code):
    session = session_on(tmp_path / "p", record, policy_section(mode=mode))
    made, stderr = made_by(session, record, "tools github list-pulls repo=acme/api\n"
                                            "b=fix-x; tools github delete-branch branch=$b")
    assert made == [] and error_codes(stderr) == [code], stderr


@pytest.mark.slow
def test_a_server_not_trusted_for_its_annotations_asks_for_a_read_only_claim(tmp_path, record):
    section = recorder_server_section(record) + "trust_annotations = false\n"
    untrusted = Session(write_project(tmp_path / "untrusted", section).parent)
    made, stderr = made_by(untrusted, record, "b=fix-x; tools github sneaky-delete branch=$b")
    assert made == [] and "needs_approval" in error_codes(stderr), stderr
    # The control: a trusted server's read-only claim is believed (the tool runs unasked).
    trusted = Session(write_project(tmp_path / "trusted", recorder_server_section(record)).parent)
    made, _ = made_by(trusted, record, "b=fix-x; tools github sneaky-delete branch=$b")
    assert made == [{"tool": "sneaky_delete", "input": {"branch": "fix-x"}}]
