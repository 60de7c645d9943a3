"""What a person reads, through a real kernel: `jq=` / `--jq` on direct calls (issue 37
item 8), and the small messages of item 6 and "one voice"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_helpers import CellRun, github_toml, loaded_kernel, policy_toml, write_config


def base_config() -> str:
    return github_toml() + policy_toml()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    project = tmp_path_factory.mktemp("voice") / "project"
    project.mkdir()
    write_config(project, base_config())
    return project


@pytest.fixture(scope="module")
def kernel(workdir):
    with loaded_kernel(workdir) as k:
        k.execute_ok("import toolkernel")
        yield k


@pytest.fixture
def config(workdir):
    """Rewrite toolkernel.toml for one test; the base config comes back afterwards."""
    yield lambda text: write_config(workdir, text)
    write_config(workdir, base_config())


# -- jq (item 8) ---------------------------------------------------------------------------


def test_call_with_jq_gives_every_output_as_python_values(kernel):
    kernel.execute_ok(
        "numbers = toolkernel.call('github', 'list-pulls', repo='acme/api', jq='.[] | .number')\n"
        "one = toolkernel.call('github', 'list-pulls', repo='acme/api', jq='length')\n"
        "none = toolkernel.call('github', 'list-pulls', repo='acme/api', jq='.[] | select(.number > 999)')\n"
        "first = toolkernel.call('github', 'get-pull', repo='acme/api', number=101, jq='{number, title}')")
    assert kernel.value("numbers") == [101, 102, 103, 104]
    assert kernel.value("one") == 4  # one output: that value, not a list of one
    assert kernel.value("none") == []
    assert kernel.value("first") == {"number": 101, "title": "Add rate limiting to /search"}


def test_tools_line_with_jq_returns_the_filtered_value(kernel):
    kernel.execute_ok("titles = %tools github list-pulls repo=acme/api --jq '[.[] | .title] | sort | .[0]'\n"
                      "nums = %tools github list-pulls --jq=.[].number repo=acme/api")
    assert kernel.value("titles") == "Add rate limiting to /search"
    assert kernel.value("nums") == [101, 102, 103, 104]


def test_a_bad_filter_is_one_line_and_makes_no_call(kernel):
    run = kernel.execute("toolkernel.call('github', 'create-issue', repo='acme/api', title='x', jq='.[ | x')")
    assert run.status == "error"
    assert run.error["ename"] == "InvalidInput"
    assert run.error["evalue"].startswith("jq: syntax error") and "\n" not in run.error["evalue"]
    # create-issue asks a person: no question came, so no call was made
    assert "approv" not in run.stdout + run.stderr
    line = kernel.execute("%tools github list-pulls repo=acme/api --jq '.[ | x'")
    assert line.status == "error"  # IPython shows a UsageError as one stderr line
    assert line.stderr.startswith("UsageError: %tools --jq: jq: syntax error") and line.stderr.count("\n") == 1
    for words in ("--jq", "--jq . --jq ."):
        run = kernel.execute(f"%tools github list-pulls repo=acme/api {words}")
        assert run.status == "error" and run.stderr.startswith("UsageError: %tools: --jq takes one FILTER"), words


def test_a_filter_that_fails_on_the_result_is_one_coded_line(kernel):
    run = kernel.execute("toolkernel.call('github', 'list-pulls', repo='acme/api', jq='.number')")
    assert run.status == "error" and run.error["ename"] == "InvalidInput"
    assert run.error["evalue"] == 'jq: Cannot index array with string ("number")'
    line = kernel.execute("%tools github list-pulls repo=acme/api --jq .number")
    assert line.status == "error"
    assert json.loads(line.error["evalue"])["error"] == {
        "code": "invalid_input", "message": 'jq: Cannot index array with string ("number")', "retryable": False}
    assert len(line.error["traceback"]) == 1


# -- what a person notices (item 6) ---------------------------------------------------------


def answered(kernel, code: str, reply: str) -> CellRun:
    """Run `code` with a person at the prompt who replies `reply`."""
    messages: list = []

    def person(msg) -> None:
        messages.append(msg)
        kernel.client.input(reply)

    done = kernel.client.execute_interactive(code, allow_stdin=True, stdin_hook=person,
                                             output_hook=messages.append, timeout=120)
    return CellRun(done, messages)


@pytest.mark.parametrize("magic", ["%%tools", "%%bash"])
def test_a_call_denied_before_the_start_fails_the_cell_so_run_all_stops(kernel, magic):
    denied = answered(kernel, f"{magic}\ntools github delete-branch branch=d1\necho after", "d")
    assert denied.status == "error" and "after" not in denied.stdout
    assert "denied; nothing ran" in denied.stdout
    assert denied.error["traceback"] == [
        "ScriptFailed: the cell stops here: a call was denied before the start"]
    kept = answered(kernel, f"{magic} --no-raise-error\ntools github delete-branch branch=d2", "d")
    assert kept.status == "ok" and "denied; nothing ran" in kept.stdout
    questions = [d["content"]["data"]["application/vnd.toolkernel.approval+json"]
                 for d in denied.of_type("display_data", "update_display_data")
                 if "application/vnd.toolkernel.approval+json" in d["content"].get("data", {})]
    # One question for JupyterLab's buttons, "Always allow" among them, in a %%bash cell too; the
    # answer updates it in place, so its buttons end with it (the update says which was chosen).
    [question, ended] = questions
    assert question["always_offered"] is True and "answered" not in question
    assert question["call"] == {"tool": "tools github delete-branch", "input": {"branch": "d1"}}
    assert ended == {**question, "answered": "deny"}


def test_a_direct_call_that_fails_shows_one_line_not_a_traceback(kernel):
    run = kernel.execute("toolkernel.call('github', 'get-pull', repo='acme/api')")  # `number` missing
    assert run.status == "error" and run.error["ename"] == "InvalidInput"
    assert len(run.error["traceback"]) == 1
    assert run.error["traceback"][0].startswith("InvalidInput: input: 'number' is a required property")
    caught = kernel.execute_ok("try:\n    toolkernel.call('github', 'get-pull', repo='acme/api')\n"
                               "except toolkernel.InvalidInput as exc:\n    code = exc.code")
    assert caught.status == "ok" and kernel.value("code") == "invalid_input"  # still an exception to catch


def test_a_bash_cell_stopped_at_a_call_reads_like_a_tools_cell(kernel):
    run = kernel.execute("%%bash\nb=x\ntools github delete-branch branch=$b\necho after")
    assert run.status == "error" and "after" not in run.stdout
    report = next(d for d in run.displays() if "application/vnd.toolkernel.report+json" in d.get("data", {}))
    # "Always allow" is offered, as on a %%tools cell's report; the SIGTERM that stopped bash is not an exit code
    assert report["metadata"]["application/vnd.toolkernel.report+json"] == {"always_offered": True}
    text = report["data"]["text/plain"]
    assert text.startswith("tools: the script stopped; no read-only calls.") and "143" not in text
    assert "143" not in report["data"]["text/html"]
    assert run.error["traceback"] == ["ScriptFailed: bash was stopped at a call: the report above says which and why"]


@pytest.mark.parametrize("magic", ["%%tools", "%%bash"])
def test_out_keeps_stdout_instead_of_showing_it_in_both_cells(kernel, magic):
    run = kernel.execute_ok(f"{magic} --out kept\necho kept-line")
    assert "kept-line" not in run.stdout
    assert kernel.value("kept").strip() == "kept-line"


def test_a_stop_says_how_to_answer_once_where_the_person_reads_it(kernel):
    run = kernel.execute("%%tools\nb=x1\ntools github delete-branch branch=$b")
    line = json.loads(run.stderr.strip().splitlines()[-1])["error"]
    assert line["code"] == "needs_approval" and "%tools approve" not in line["message"]  # not red beside the buttons
    report = next(d for d in run.displays() if "application/vnd.toolkernel.report+json" in d.get("data", {}))
    assert "%tools approve" in report["data"]["text/plain"]  # the report says it, where the buttons are
    before = kernel.execute("%%tools\ntools github delete-branch branch=x2")
    assert "%tools approve" not in before.stderr and "did not start" in before.stderr
    direct = kernel.execute("toolkernel.call('github', 'delete-branch', branch='x3')")
    assert direct.error["ename"] == "NeedsApproval"  # no report here: the message says how
    assert direct.error["evalue"].endswith("the call was not made. Answer with `%tools approve` (or --always) or"
                                           " `toolkernel.approve()`, then make the call again")
