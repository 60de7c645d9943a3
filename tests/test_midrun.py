"""Mid-run questions in place (issue 37): a call built while the script runs that needs a person
waits at that call where a person's front end can ask (stdin, JupyterLab's buttons); allowed, the
script goes on from there; denied, the call fails with `denied` and the script decides. Agents'
cells and `[approvals] mid_run = "stop"` keep the seed's stop-and-report. Real kernels throughout."""

from __future__ import annotations

import queue
import time
from pathlib import Path

import pytest
from kernel_helpers import CellRun, error_lines, github_toml, loaded_kernel, write_config

from toolkernel._approval._approver import ANSWER_PROMPT
from toolkernel._frontends._lab import APPROVAL_MIME
from toolkernel._frontends._report import MIME as REPORT_MIME

pytestmark = pytest.mark.timeout(300)

# Built at run time (a loop's variable), so the before-start check cannot see it.
BUILT = 'for b in fix-x; do tools github delete-branch "branch=$b"{handle}; done\necho after\n'
CALL = {"tool": "tools github delete-branch", "input": {"branch": "fix-x"}}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    project = tmp_path_factory.mktemp("midrun") / "project"
    project.mkdir()
    write_config(project, github_toml())
    return project


@pytest.fixture(scope="module")
def kernel(workdir):
    with loaded_kernel(workdir) as k:
        yield k


@pytest.fixture
def config(workdir):
    yield lambda text: write_config(workdir, github_toml() + text)
    write_config(workdir, github_toml())


def with_stdin(kernel, code: str, answers: list[str]) -> tuple[list[str], CellRun]:
    """Run a cell in a front end that offers stdin; `answers` reply to its prompts in turn
    ("^C" interrupts the kernel instead)."""
    prompts, messages, replies = [], [], iter(answers)

    def answer(msg):
        prompts.append(msg["content"]["prompt"])
        reply = next(replies)
        if reply == "^C":
            kernel.manager.interrupt_kernel()
        else:
            kernel.client.input(reply)

    reply = kernel.client.execute_interactive(code, allow_stdin=True, stdin_hook=answer,
                                              output_hook=messages.append, timeout=180)
    return prompts, CellRun(reply, messages)


def error_codes(stderr: str) -> list[str]:
    return [error["code"] for error in error_lines(stderr)]


def questions(run: CellRun) -> list[dict]:
    """The question as first shown, then each update of it (the answer that ended it)."""
    return [m["content"]["data"][APPROVAL_MIME] for m in run.of_type("display_data", "update_display_data")
            if APPROVAL_MIME in m["content"].get("data", {})]


def report(run: CellRun) -> dict:
    [shown] = [m["content"]["data"][REPORT_MIME] for m in run.of_type("display_data")
               if REPORT_MIME in m["content"].get("data", {})]
    return shown


def test_allowed_once_mid_run_the_script_goes_on_from_the_call_and_the_report_says_so(kernel):
    prompts, run = with_stdin(kernel, "%%tools\necho before\n" + BUILT.format(handle=""), ["o"])
    assert run.status == "ok", run.error
    # Shown once (the bundle: buttons, or its text), and the prompt under it asks only for the answer.
    assert prompts == [ANSWER_PROMPT]
    assert run.stdout == "before\nallowed once; making the call\ndeleted branch fix-x\nafter\n"
    [question, ended] = questions(run)
    assert question["call"] == CALL and ended["answered"] == "once"
    tools = report(run)["tools"]
    assert tools["asked"] == [{**CALL, "answer": "allowed once"}] and "stopped" not in tools
    assert tools["done"][0]["ok"] is True


def test_denied_mid_run_the_call_fails_with_denied_and_the_scripts_own_handling_decides(kernel):
    handled = BUILT.format(handle=' || echo "handled: $?"')
    prompts, run = with_stdin(kernel, "%%tools\n" + handled, ["d"])
    assert run.status == "ok", run.error  # the script went on: its own handling decided
    assert run.stdout == "denied; the call was not made\nhandled: 1\nafter\n"
    assert '"code": "denied"' in run.stderr and "deleted" not in run.stdout
    assert questions(run)[-1]["answered"] == "deny"
    assert report(run)["tools"]["asked"] == [{**CALL, "answer": "denied"}]
    # Unhandled, with `set -e`, the denial ends the script and fails the cell.
    prompts, run = with_stdin(kernel, "%%tools\nset -e\n" + BUILT.format(handle=""), ["d"])
    assert run.status == "error" and "after" not in run.stdout
    assert report(run)["tools"]["asked"] == [{**CALL, "answer": "denied"}]


def test_always_allowed_mid_run_is_saved_and_said_in_the_report(kernel, workdir):
    prompts, run = with_stdin(kernel, "%%tools\n" + BUILT.format(handle=""), ["a"])
    try:
        assert run.status == "ok", run.error
        assert report(run)["tools"]["asked"] == [{**CALL, "answer": "always allowed"}]
        again = kernel.execute("%%tools\n" + BUILT.format(handle=""))  # no stdin: allowed, nothing asked
        assert again.status == "ok" and "deleted branch fix-x" in again.stdout and not questions(again)
    finally:
        kernel.execute_ok("%tools approvals --revoke 1")


def test_an_interrupt_while_a_mid_run_question_is_open_cancels_it_and_says_so_truly(kernel):
    prompts, run = with_stdin(kernel, "%%tools\n" + BUILT.format(handle=""), ["^C"])
    assert len(prompts) == 1 and run.status == "error"
    # Nothing printed, and no exit code was returned: the line says what was cut short (the call's
    # own error line, when the script's thread ends within the grace, says it was stopped).
    assert run.stdout == "" and error_codes(run.stderr) in ([], ["stopped"])
    assert run.error["traceback"] == [
        'ScriptFailed: tools: interrupted while a person was asked about tools github delete-branch'
        ' {"branch": "fix-x"}: the question is cancelled and the call was not made']
    assert questions(run)[-1]["answered"] == "cancelled"  # its buttons end, saying "cancelled"
    shown = report(run)
    assert shown["tools"]["asked"] == [{**CALL, "answer": "cancelled"}] and shown["success"] is False
    # The kernel goes on, and nothing was left to approve.
    after = kernel.execute("%tools approve")
    assert after.status == "error" and "no call is waiting" in after.stderr


def test_an_interrupt_after_output_keeps_that_output_and_says_so(kernel):
    prompts, run = with_stdin(kernel, "%%tools\necho printed\n" + BUILT.format(handle=""), ["^C"])
    assert "printed" in run.stdout
    assert "interrupted while a person was asked about" in run.error["traceback"][0]


def test_mid_run_stop_keeps_the_seeds_stop_and_report(kernel, config):
    config('\n[approvals]\nmid_run = "stop"\n')
    prompts, run = with_stdin(kernel, "%%tools\n" + BUILT.format(handle=""), [])
    assert prompts == [] and run.status == "error" and "after" not in run.stdout
    tools = report(run)["tools"]
    assert tools["stopped"]["reason"] == "needs_approval" and "asked" not in tools
    kernel.execute_ok("%tools deny")


def test_a_cell_an_agent_sent_stops_and_reports_even_with_stdin_offered(kernel):
    """An agent's cell (notebook-run marks its request) keeps the seed's stop-and-report: its
    person is not at the cell, and an answer there would be the agent's own."""
    client = kernel.client
    msg = client.session.msg("execute_request", {
        "code": "%%tools\n" + BUILT.format(handle=""), "silent": False, "store_history": False,
        "user_expressions": {}, "allow_stdin": True, "stop_on_error": True})
    msg["metadata"]["toolkernel"] = {"agent": True}
    client.shell_channel.send(msg)
    msg_id = msg["header"]["msg_id"]
    messages, deadline = [], time.monotonic() + 180
    while time.monotonic() < deadline:
        with pytest.raises(queue.Empty):
            client.get_stdin_msg(timeout=0.01)  # never asked
        try:
            seen = client.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        if seen["parent_header"].get("msg_id") != msg_id:
            continue
        messages.append(seen)
        if seen["msg_type"] == "status" and seen["content"]["execution_state"] == "idle":
            break
    reply = client.get_shell_msg(timeout=60)
    run = CellRun(reply, messages)
    assert not questions(run) and "after" not in run.stdout
    assert report(run)["tools"]["stopped"]["reason"] == "needs_approval"
    kernel.execute_ok("%tools deny")


def test_the_approvals_table_is_checked(tmp_path, monkeypatch):
    from kernel_helpers import isolated_env

    from toolkernel._config._config import load_config
    from toolkernel._errors import ConfigError

    for name, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    write_config(tmp_path, '[approvals]\nmid_run = "stop"\n')
    assert load_config(tmp_path).mid_run == "stop"
    write_config(tmp_path, "")
    assert load_config(tmp_path).mid_run == "ask"
    for bad, said in (('mid_run = "later"', 'expected "ask" or "stop"'), ("mid_run = 1", "approvals.mid_run"),
                      ('when = "ask"', "unknown key")):
        write_config(tmp_path, f"[approvals]\n{bad}\n")
        with pytest.raises(ConfigError, match=said):
            load_config(tmp_path)


def test_a_host_bash_cell_asks_mid_run_in_place_too(kernel):
    """Host `%%bash`: the call waits on the shim's socket while the person answers, and the real
    bash process goes on from it."""
    if not Path("/bin/bash").exists():
        pytest.skip("no bash on this host")
    prompts, run = with_stdin(kernel, "%%bash\necho before\n" + BUILT.format(handle=""), ["o"])
    assert run.status == "ok", run.error
    assert prompts == [ANSWER_PROMPT]
    assert "before\n" in run.stdout and "deleted branch fix-x\n" in run.stdout and "after\n" in run.stdout
    assert report(run)["tools"]["asked"] == [{**CALL, "answer": "allowed once"}]


def test_allow_once_covers_one_call_the_same_call_again_asks_again(kernel):
    twice = 'for b in fix-x fix-x; do tools github delete-branch "branch=$b" || echo "second: $?"; done\n'
    prompts, run = with_stdin(kernel, "%%tools\n" + twice, ["o", "d"])
    assert prompts == [ANSWER_PROMPT, ANSWER_PROMPT], run.stdout
    assert [a["answer"] for a in report(run)["tools"]["asked"]] == ["allowed once", "denied"]
    assert "deleted branch fix-x" in run.stdout and "second: 1" in run.stdout


def test_an_interrupt_during_a_host_bash_cells_question_cancels_it_and_ends_the_group(kernel):
    if not Path("/bin/bash").exists():
        pytest.skip("no bash on this host")
    prompts, run = with_stdin(kernel, "%%bash\n" + BUILT.format(handle=""), ["^C"])
    assert len(prompts) == 1 and run.status == "error" and "after" not in run.stdout
    assert run.error["evalue"] == ('bash: interrupted while a person was asked about tools github delete-branch'
                                   ' {"branch": "fix-x"}: the question is cancelled and the call was not made;'
                                   " its process group was ended")
    assert questions(run)[-1]["answered"] == "cancelled"
    assert kernel.execute_ok("print('alive')").stdout == "alive\n"
