"""The approval layer end to end: the seed's scenarios through a real kernel.

Each test starts a real IPython kernel (jupyter_client) in its own project
folder whose toolkernel.toml points at the demo `github` MCP server, runs
cells as a notebook would, and checks what the person is shown: the streams,
the report bundle (`application/vnd.toolkernel.report+json`), the failed cell.
The frontend is headless (stdin not allowed), so a call that asks is
`needs_approval`.
"""

from __future__ import annotations

import json
import sys

import pytest

from approval_helpers import (
    REPORT_MIME, SERVERS, Kernel, demo_server_section, error_codes, hook_section, kernel_env, policy_section,
    write_project,
)

pytestmark = pytest.mark.timeout(900)

NOT_REACHED = "the stopped call and everything after it; write a new script for the rest"
DELETE_FIX_X = {"tool": "tools github delete-branch", "input": {"branch": "fix-x"}}
DELETE_FROM_LOOP = """
for b in fix-x; do
  tools github delete-branch "branch=$b"
done
"""


@pytest.fixture
def start_kernel(tmp_path):
    """Start kernels in project folders under tmp_path; all are shut down after the test."""
    kernels: list[Kernel] = []

    def start(*sections: str, name: str = "project", **env: str) -> Kernel:
        workdir = write_project(tmp_path / name, demo_server_section(), *sections).parent
        kernel = Kernel(workdir, kernel_env(workdir, **env))
        kernels.append(kernel)
        return kernel

    yield start
    for kernel in kernels:
        kernel.close()


def tools_cell(script: str, flags: str = "") -> str:
    return f"%%tools {flags}\n{script.strip()}\n"


def assert_failed_with_report(cell) -> dict:
    assert not cell.ok and cell.error is not None and cell.error["ename"] == "ScriptFailed", cell
    return cell.report


# -- before the start ------------------------------------------------------------------


def test_a_literal_destructive_call_stops_the_script_before_it_starts(start_kernel):
    kernel = start_kernel()
    cell = kernel.run(tools_cell("""
echo started > started.txt
echo printed
tools github list-pulls repo=acme/api
tools github delete-branch branch=fix-x
echo after
"""))
    report = assert_failed_with_report(cell)
    assert report == {
        "version": 1,
        "exit_code": 1,
        "success": False,
        "tools": {
            "done": [],
            "read_only_calls": 0,
            "stopped": {"reason": "needs_approval", "approval": "requested", "call": DELETE_FIX_X,
                        "before_start": True},
            "not_reached": NOT_REACHED,
        },
    }
    assert "printed" not in cell.stdout and "after" not in cell.stdout
    assert not (kernel.workdir / "started.txt").exists(), "nothing before the call may run"
    assert "needs_approval" in error_codes(cell.stderr)


def test_the_report_bundle_has_text_and_html_fallbacks_naming_the_call(start_kernel):
    kernel = start_kernel()
    cell = kernel.run(tools_cell("tools github delete-branch branch=fix-x"))
    bundle = next(d for d in cell.displays if REPORT_MIME in d)
    assert bundle["text/plain"].startswith("tools: the script did not start; no read-only calls.")
    assert len(bundle["text/plain"].splitlines()) < 10 and "{\n" not in bundle["text/plain"]
    assert "%tools approve" in bundle["text/plain"]
    assert "delete-branch" in bundle["text/html"] and "fix-x" in bundle["text/html"]


# -- while it runs ---------------------------------------------------------------------


def test_a_call_built_in_a_loop_stops_the_script_mid_run_with_the_exact_report(start_kernel):
    kernel = start_kernel()
    # create-issue asks too: the first run does not start; "always" allows it from now on.
    first = kernel.run(tools_cell('tools github create-issue "title=Flaky test"'))
    assert assert_failed_with_report(first)["tools"]["stopped"]["before_start"] is True
    assert kernel.run("%tools approve --always").ok

    cell = kernel.run(tools_cell(f"""
tools github list-pulls repo=acme/api > /dev/null
tools github get-pull repo=acme/api number=101 | jq -r .title
tools github list-pulls repo=acme/web > /dev/null
tools github create-issue "title=Flaky test" | jq -c '{{id}}'
echo "before the stop"
{DELETE_FROM_LOOP}
echo "after the stop"
echo written > after.txt
"""))
    report = assert_failed_with_report(cell)
    assert report == {
        "version": 1,
        "exit_code": 1,
        "success": False,
        "tools": {
            "done": [{"tool": "tools github create-issue", "input": {"title": "Flaky test"}, "ok": True,
                      "result": {"id": "ACME-1201", "number": 1201, "title": "Flaky test"}}],
            "read_only_calls": 3,
            "stopped": {"reason": "needs_approval", "approval": "requested", "call": DELETE_FIX_X},
            "not_reached": NOT_REACHED,
        },
    }
    assert cell.stdout.splitlines() == ["Add rate limiting to /search", '{"id":"ACME-1201"}', "before the stop"]
    assert not (kernel.workdir / "after.txt").exists(), "nothing after the stop may run"
    assert "needs_approval" in error_codes(cell.stderr)


# A hostile server's tool name, and a script's input, may hold terminal control sequences and a
# bidi override: what the person reads (a terminal IPython prints the text/plain part, a page
# shows the HTML) must show them escaped, or the call they approve reads as another.
TRICKS = ("\x1b", "\x07", "\u202e", "\x9b")
DISGUISED = (f"[mcp_servers.dis]\ncommand = {json.dumps(sys.executable)}\n"
             f"args = [{json.dumps(str(SERVERS / 'disguised.py'))}]\n")


def test_control_characters_in_the_stopped_call_are_shown_escaped(start_kernel):
    kernel = start_kernel(DISGUISED, policy_section(allow=["github create-issue"]))
    # The tool's name as the server sent it (help shows it escaped), and inputs of the script's.
    name = r"push\033]52;c;cm0gLXJmIH4=\007\033[2K\342\200\256hsup\302\2332J"
    branch = r"fix\342\200\256gnp.exe\302\233"
    cell = kernel.run(tools_cell(f"""
tools github create-issue "title=$(printf '{branch}')" > /dev/null
for n in "$(printf '{name}')"; do tools dis "$n" "branch=$(printf '{branch}')"; done
"""))
    assert [call["tool"] for call in cell.report["tools"]["done"]] == ["tools github create-issue"]
    assert cell.report["tools"]["stopped"]["call"]["tool"].startswith("tools dis push\x1b")  # the true call
    bundle = next(d for d in cell.displays if REPORT_MIME in d)
    for text in (bundle["text/plain"], bundle["text/html"], cell.stderr):
        assert not any(trick in text for trick in TRICKS), repr(text)
    assert "push\\x1b]52" in bundle["text/plain"] and "\\u202e" in bundle["text/plain"], bundle["text/plain"]
    assert error_codes(cell.stderr) == ["needs_approval"]


# -- the person's answers --------------------------------------------------------------


def test_a_one_off_approval_lets_the_rerun_pass_once_and_not_twice(start_kernel):
    kernel = start_kernel()
    stopped = kernel.run(tools_cell(DELETE_FROM_LOOP))
    assert assert_failed_with_report(stopped)["tools"]["stopped"]["call"] == DELETE_FIX_X

    answer = kernel.run("%tools approve")
    assert answer.ok and "allowed once" in answer.stdout, answer

    rerun = kernel.run(tools_cell(DELETE_FROM_LOOP))
    assert rerun.ok, rerun
    assert rerun.stdout.strip() == "deleted branch fix-x" and rerun.reports == []

    again = kernel.run(tools_cell(DELETE_FROM_LOOP))
    assert assert_failed_with_report(again)["tools"]["stopped"]["call"] == DELETE_FIX_X
    assert "deleted branch" not in again.stdout


def test_a_one_off_approval_of_a_script_that_did_not_start_lets_the_same_script_start_once(start_kernel):
    kernel = start_kernel()
    script = tools_cell("echo start\ntools github delete-branch branch=fix-x")
    assert assert_failed_with_report(kernel.run(script))["tools"]["stopped"]["before_start"] is True
    assert kernel.run("%tools approve").ok

    rerun = kernel.run(script)
    assert rerun.ok and rerun.stdout == "start\ndeleted branch fix-x\n", rerun

    again = kernel.run(script)
    assert assert_failed_with_report(again)["tools"]["stopped"]["before_start"] is True
    assert "start" not in again.stdout


def test_a_one_off_approval_covers_that_input_only(start_kernel):
    kernel = start_kernel()
    kernel.run(tools_cell(DELETE_FROM_LOOP))
    assert kernel.run("%tools approve").ok
    other = kernel.run(tools_cell('for b in wip-auth; do tools github delete-branch "branch=$b"; done'))
    report = assert_failed_with_report(other)
    assert report["tools"]["stopped"]["call"]["input"] == {"branch": "wip-auth"}
    assert "deleted branch" not in other.stdout


def test_a_denial_keeps_asking(start_kernel):
    kernel = start_kernel()
    kernel.run(tools_cell(DELETE_FROM_LOOP))
    answer = kernel.run("%tools deny")
    assert answer.ok and "denied" in answer.stdout, answer
    again = kernel.run(tools_cell(DELETE_FROM_LOOP))
    assert assert_failed_with_report(again)["tools"]["stopped"]["reason"] == "needs_approval"
    assert "deleted branch" not in again.stdout


def test_always_allow_persists_in_the_project_is_listed_and_revocable(start_kernel):
    kernel = start_kernel()
    kernel.run(tools_cell('tools github create-issue "title=One"'))
    answer = kernel.run("%tools approve --always")
    assert answer.ok and "mcp_github__create_issue" in answer.stdout, answer

    saved = json.loads((kernel.workdir / ".toolkernel" / "approvals.json").read_text())
    assert [entry["rule"] for entry in saved["allow"]] == ["mcp_github__create_issue"]
    listing = kernel.run("%tools approvals")
    assert listing.ok and listing.stdout.strip() == "1. mcp_github__create_issue", listing

    # Another kernel on the same project finds the approval on disk.
    other = start_kernel()
    made = other.run(tools_cell('tools github create-issue "title=Two" | jq -r .title'))
    assert made.ok and made.stdout == "Two\n", made

    for missing in ("2", "0"):
        refused = other.run(f"%tools approvals --revoke {missing}")
        assert "UsageError: no lasting approval" in refused.stderr + str(refused.error), refused
    absent = other.run("%tools approvals --revoke mcp_github__delete_branch")  # said; nothing allows it
    assert absent.ok and absent.stdout.startswith("nothing to revoke: no lasting approval"), absent
    revoked = other.run("%tools approvals --revoke 1")
    assert revoked.ok and revoked.stdout.strip() == (
        "revoked mcp_github__create_issue\nno lasting approvals left"), revoked
    asks = kernel.run(tools_cell('tools github create-issue "title=Three"'))
    assert assert_failed_with_report(asks)["tools"]["stopped"]["call"]["tool"] == "tools github create-issue"


def test_the_comm_target_answers_allow_once(start_kernel):
    kernel = start_kernel()
    kernel.run(tools_cell(DELETE_FROM_LOOP))

    unknown = kernel.comm_request("toolkernel.approval", {"action": "maybe", "call": DELETE_FIX_X})
    assert unknown["ok"] is False
    wrong_call = kernel.comm_request("toolkernel.approval", {
        "action": "allow_once", "call": {"tool": "tools github delete-branch", "input": {"branch": "main"}}})
    assert wrong_call["ok"] is False

    reply = kernel.comm_request("toolkernel.approval", {"action": "allow_once", "call": DELETE_FIX_X})
    assert reply["ok"] is True and "allowed once" in reply["message"], reply

    rerun = kernel.run(tools_cell(DELETE_FROM_LOOP))
    assert rerun.ok and rerun.stdout.strip() == "deleted branch fix-x", rerun
    again = kernel.run(tools_cell(DELETE_FROM_LOOP))
    assert not again.ok and again.report["tools"]["stopped"]["call"] == DELETE_FIX_X

    nothing_left = kernel.comm_request("toolkernel.approval", {"action": "deny", "call": {
        "tool": "tools github create-issue", "input": {"title": "never asked"}}})
    assert nothing_left["ok"] is False


def test_direct_calls_ask_too_and_a_python_approval_lets_one_through(start_kernel):
    kernel = start_kernel()
    line = kernel.run("%tools github delete-branch branch=fix-x")
    assert not line.ok and line.error["ename"] == "CallFailed" and "needs_approval" in line.error["evalue"], line

    api = kernel.run(
        "import toolkernel\n"
        "try:\n"
        "    toolkernel.call('github', 'delete-branch', branch='fix-x')\n"
        "except toolkernel.NeedsApproval as exc:\n"
        "    print('asked:', exc.code)\n"
        "print(toolkernel.approve())\n"
        "print(toolkernel.call('github', 'delete-branch', branch='fix-x'))\n"
        "try:\n"
        "    toolkernel.call('github', 'delete-branch', branch='fix-x')\n"
        "except toolkernel.NeedsApproval:\n"
        "    print('asked again')\n"
    )
    assert api.ok, api
    lines = api.stdout.splitlines()
    assert lines[0] == "asked: needs_approval" and lines[1].startswith("allowed once")
    assert lines[2:] == ["deleted branch fix-x", "asked again"]


# -- policy ------------------------------------------------------------------------------


def test_deny_beats_allow(start_kernel):
    kernel = start_kernel(policy_section(
        mode="bypass-permissions",
        allow=["github *", "mcp_github__delete_branch"],
        deny=["github delete-branch(branch=fix-*)"],
    ))
    cell = kernel.run(tools_cell("""
tools github delete-branch branch=wip-auth
tools github delete-branch branch=fix-x
echo "exit $?"
"""), )
    assert cell.ok, cell  # a denial is an error of that call; the script goes on
    assert cell.stdout.splitlines() == ["deleted branch wip-auth", "exit 1"]
    assert error_codes(cell.stderr) == ["denied"]

    last_fails = kernel.run(tools_cell("tools github delete-branch branch=wip-auth\n"
                                       "tools github delete-branch branch=fix-x"))
    report = assert_failed_with_report(last_fails)
    assert report == {"version": 1, "exit_code": 1, "success": False, "tools": {
        "done": [{"tool": "tools github delete-branch", "input": {"branch": "wip-auth"}, "ok": True,
                  "result": "deleted branch wip-auth"}],
        "read_only_calls": 0}}


def test_a_lasting_approval_does_not_beat_a_deny_rule(start_kernel):
    kernel = start_kernel(policy_section(deny=["github delete-branch"]))
    approvals = kernel.workdir / ".toolkernel"
    approvals.mkdir()
    (approvals / "approvals.json").write_text(json.dumps(
        {"version": 1, "allow": [{"rule": "mcp_github__delete_branch", "added": ""}]}))
    cell = kernel.run(tools_cell("tools github delete-branch branch=fix-x"))
    assert not cell.ok and error_codes(cell.stderr) == ["denied"], cell
    assert "deleted branch" not in cell.stdout


def test_admin_deny_beats_a_project_allow(start_kernel, tmp_path):
    admin = write_project(tmp_path / "admin", policy_section(mode="default", deny=["github delete-branch"],
                                                             ceiling=True))
    kernel = start_kernel(
        policy_section(mode="bypass-permissions", allow=["mcp_github__delete_branch"]),
        TOOLKERNEL_ADMIN_CONFIG=str(admin),
    )
    cell = kernel.run(tools_cell("tools github delete-branch branch=fix-x"))
    assert not cell.ok and error_codes(cell.stderr) == ["denied"], cell
    assert "deleted branch" not in cell.stdout
    line = kernel.run("%tools github delete-branch branch=wip-auth")
    assert not line.ok and '"denied"' in line.error["evalue"], line

    # The admin's mode ceiling (default) caps the project's bypass-permissions: create-issue asks.
    capped = kernel.run(tools_cell('tools github create-issue "title=Capped"'))
    assert assert_failed_with_report(capped)["tools"]["stopped"]["reason"] == "needs_approval"


# -- guardrails and hooks ------------------------------------------------------------------

COMMAND_HOOK_DENY = (
    "import json, sys; call = json.load(sys.stdin); "
    "print(json.dumps({'action': 'deny', 'reason': 'no issues today: ' + call['input']['title']}))"
)
COMMAND_HOOK_REDACT = "import json, sys; json.load(sys.stdin); print(json.dumps({'redact': ['dependabot']}))"


def test_hooks_deny_before_the_call_and_a_failing_hook_denies(start_kernel):
    kernel = start_kernel(
        policy_section(allow=["mcp_github__delete_branch", "mcp_github__create_issue"]),
        hook_section("before_call", "github create-issue", [sys.executable, "-c", COMMAND_HOOK_DENY]),
    )
    registered = kernel.run(
        "import toolkernel\n"
        "from toolkernel._approval._hooks import HookOutcome\n"
        "@toolkernel.before_call('github delete-branch(branch=fix-*)')\n"
        "def protect(call):\n"
        "    return HookOutcome('deny', 'fix branches are protected')\n"
        "@toolkernel.before_call('github list-pulls')\n"
        "def broken(call):\n"
        "    raise RuntimeError('a bug in the guardrail')\n"
    )
    assert registered.ok, registered
    cell = kernel.run(tools_cell("""
tools github delete-branch branch=wip-auth
tools github delete-branch branch=fix-x
tools github create-issue "title=Hello"
tools github list-pulls repo=acme/api
tools github get-pull repo=acme/api number=101 | jq -r .title
"""))
    assert cell.ok, cell
    assert cell.stdout.splitlines() == ["deleted branch wip-auth", "Add rate limiting to /search"]
    errors = [json.loads(line)["error"] for line in cell.stderr.splitlines() if line.startswith("{")]
    assert [e["code"] for e in errors] == ["denied", "denied", "denied"], cell.stderr
    assert "fix branches are protected" in errors[0]["message"]
    assert "no issues today: Hello" in errors[1]["message"]
    assert "a bug in the guardrail" in errors[2]["message"] or "RuntimeError" in errors[2]["message"]


def test_post_call_hooks_redact_the_result_before_the_script_sees_it(start_kernel):
    kernel = start_kernel(
        hook_section("after_call", "github list-pulls", [sys.executable, "-c", COMMAND_HOOK_REDACT]),
    )
    registered = kernel.run(
        "import toolkernel\n"
        "from toolkernel._approval._hooks import redact\n"
        "@toolkernel.after_call('mcp_github__get_pull')\n"
        "def hide(call, result):\n"
        "    return redact(result, ['mira'])\n"
    )
    assert registered.ok, registered
    cell = kernel.run(tools_cell("""
tools github get-pull repo=acme/api number=101 | jq -r .author
tools github list-pulls repo=acme/api | jq -r '.[].author'
"""))
    assert cell.ok, cell
    assert cell.stdout.splitlines() == ["[redacted]", "mira", "tomas", "ana", "[redacted]"]
    value = kernel.run("%tools github get-pull repo=acme/api number=101")
    assert value.ok and "mira" not in value.value and "[redacted]" in value.value, value


# -- the call limit --------------------------------------------------------------------------


def test_the_call_limit_stops_the_script_with_the_report(start_kernel):
    kernel = start_kernel(policy_section(allow=["mcp_github__create_issue"]))
    cell = kernel.run(tools_cell("""
tools github create-issue "title=Before the limit" > /dev/null
for i in $(seq 1 60); do
  tools github list-pulls repo=acme/api > /dev/null
  echo "call $i"
done
echo after > after.txt
"""))
    report = assert_failed_with_report(cell)
    assert report == {
        "version": 1,
        "exit_code": 1,
        "success": False,
        "tools": {
            "done": [{"tool": "tools github create-issue", "input": {"title": "Before the limit"}, "ok": True,
                      "result": {"id": "ACME-1201", "number": 1201, "title": "Before the limit"}}],
            "read_only_calls": 49,
            "stopped": {"reason": "call_limit",
                        "call": {"tool": "tools github list-pulls", "input": {"repo": "acme/api"}}},
            "not_reached": NOT_REACHED,
        },
    }
    assert cell.stdout.splitlines() == [f"call {i}" for i in range(1, 50)]
    assert not (kernel.workdir / "after.txt").exists()
    assert "call_limit" in error_codes(cell.stderr)
