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

from toolkernel._policy import canonical_call_key
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
    "alias": f"shopt -s expand_aliases\nalias del='tools github delete-branch'\ndel branch=fix-x",
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
# fail with the error code given (tool and server names are case-sensitive).
UNREACHABLE: dict[str, str] = {
    "uppercase-spelling": "unknown_command",
    "uppercase-server": "unknown_command",
}


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
