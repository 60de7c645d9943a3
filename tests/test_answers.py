"""A person's answers: approve once or always, deny, list and revoke, pair a notebook."""

import sys

import nbformat
import pytest
from IPython.core.error import UsageError

from toolkernel._frontends._answers import answer_message, manage
from kernel_helpers import RecordingSink
from toolkernel._session import Session

CONFIG = f"""
[mcp_servers.github]
command = {sys.executable!r}
args = ["-m", "toolkernel.demo_server"]

[policy]
allow = ["notebook_run"]
"""


@pytest.fixture
def session(tmp_path):
    (tmp_path / "toolkernel.toml").write_text(CONFIG)
    s = Session(tmp_path)
    yield s
    s.close()


def run(session, script):
    sink = RecordingSink()
    result = session.run_script(script, sink)
    return result, "".join(sink.out), "".join(sink.err)


DELETE = "tools github delete-branch branch=fix-x"


@pytest.mark.slow
def test_approve_once_covers_one_run_only(session):
    assert run(session, DELETE)[0].report["tools"]["stopped"]["before_start"] is True
    assert "allowed once" in manage(session, ["approve"])
    result, out, _ = run(session, DELETE)
    assert result.exit_code == 0 and result.report is None and "deleted branch fix-x" in out
    again = run(session, DELETE)[0]
    assert again.exit_code == 1 and again.report["tools"]["stopped"]["reason"] == "needs_approval"


@pytest.mark.slow
def test_approve_always_persists_and_can_be_revoked(session, tmp_path):
    run(session, DELETE)
    assert "always allowed: tools github delete-branch (the rule mcp_github__delete_branch, saved in" in manage(
        session, ["approve", "--always"])
    assert (tmp_path / ".toolkernel" / "approvals.json").exists()
    assert manage(session, ["approvals"]) == "1. mcp_github__delete_branch"
    assert run(session, DELETE)[0].exit_code == 0
    assert run(session, DELETE)[0].exit_code == 0
    assert manage(session, ["approvals", "--revoke", "1"]) == (
        "revoked mcp_github__delete_branch\nno lasting approvals left")
    assert run(session, DELETE)[0].report["tools"]["stopped"]["reason"] == "needs_approval"


@pytest.mark.slow
def test_always_is_refused_where_an_ask_rule_would_keep_asking(tmp_path):
    # The person would believe the call allowed; it stays pending, and once still works.
    (tmp_path / "toolkernel.toml").write_text(CONFIG.replace('allow = ["notebook_run"]',
                                                             'ask = ["github delete-branch"]'))
    session = Session(tmp_path)
    try:
        run(session, DELETE)
        with pytest.raises(UsageError, match="always would not let this call run unasked"):
            manage(session, ["approve", "--always"])
        assert not (tmp_path / ".toolkernel" / "approvals.json").exists()
        assert "allowed once" in manage(session, ["approve"])
        assert run(session, DELETE)[0].exit_code == 0
    finally:
        session.close()


@pytest.mark.slow
def test_deny_forgets_the_pending_call(session):
    run(session, DELETE)
    assert "denied" in manage(session, ["deny"])
    with pytest.raises(UsageError, match="no call is waiting"):
        manage(session, ["approve"])


def test_bad_arguments_are_usage_errors(session):
    with pytest.raises(UsageError, match="usage: %tools approve"):
        manage(session, ["approve", "--sometimes"])
    with pytest.raises(UsageError, match="name exactly one notebook"):
        manage(session, ["pair", "--kernel", "python3"])


@pytest.mark.slow
def test_the_comm_answer_names_the_call(session):
    stopped = run(session, DELETE)[0].report["tools"]["stopped"]
    assert answer_message(session, {"action": "maybe", "call": stopped["call"]})["ok"] is False
    other = {"tool": "tools github delete-branch", "input": {"branch": "main"}}
    assert answer_message(session, {"action": "allow_once", "call": other})["ok"] is False
    reply = answer_message(session, {"action": "allow_once", "call": stopped["call"]})
    assert reply["ok"] is True and "allowed once" in reply["message"]
    assert run(session, DELETE)[0].exit_code == 0


@pytest.mark.slow
def test_pair_then_run_code_in_the_paired_kernel(session, tmp_path):
    nbformat.write(nbformat.v4.new_notebook(), tmp_path / "nb.ipynb")
    assert "paired" in manage(session, ["pair", "nb.ipynb", "--kernel", "python3"])
    try:
        result, out, err = run(session, "tools notebook-run notebook_path=nb.ipynb code='x = 20 + 22; print(x)'")
        assert result.exit_code == 0, err
        assert "42" in out
        with pytest.raises(UsageError, match="other.ipynb is not paired"):
            manage(session, ["unpair", "other.ipynb"])
    finally:
        assert manage(session, ["unpair", "nb.ipynb"]) == "unpaired nb.ipynb"
    result, _, err = run(session, "tools notebook-run notebook_path=nb.ipynb code=1")
    assert result.exit_code == 1 and '"connection_required"' in err


@pytest.mark.slow
def test_a_one_off_approval_does_not_start_a_script_that_makes_the_call_twice(session):
    run(session, DELETE)
    manage(session, ["approve"])
    result, out, err = run(session, f"echo first\n{DELETE}\n{DELETE}")
    assert out == "" and "makes this exact call twice" in err
    assert result.report["tools"]["stopped"]["before_start"] is True
    assert run(session, DELETE)[0].exit_code == 0  # the approval was not spent


@pytest.mark.slow
def test_asking_inline_before_the_start_then_running(session):
    questions = []

    def ask(prompt):
        questions.append(prompt)
        return "o"

    sink = RecordingSink()
    result = session.run_script(f"echo start\n{DELETE}", sink, ask=ask)
    assert result.exit_code == 0 and result.report is None
    assert len(questions) == 1 and "needs your approval" in questions[0]
    assert "start\ndeleted branch fix-x" in "".join(sink.out)
    assert run(session, DELETE)[0].report["tools"]["stopped"]["reason"] == "needs_approval"


@pytest.mark.slow
def test_asking_inline_denied_or_headless_keeps_the_report(session):
    denied = session.run_script(DELETE, RecordingSink(), ask=lambda prompt: "d")
    assert denied.report["tools"]["stopped"]["before_start"] is True
    headless = session.run_script(DELETE, RecordingSink())
    assert headless.report["tools"]["stopped"]["before_start"] is True


@pytest.mark.slow
@pytest.mark.parametrize("script, expected", [
    (DELETE, "allowed once; running the script\ndeleted branch fix-x\n"),
    # Built at run time: asked where the call waits, and the script goes on from there.
    ("b=fix-x\ntools github delete-branch branch=$b\necho after",
     "allowed once; making the call\ndeleted branch fix-x\nafter\n"),
])
def test_a_kernel_that_allows_stdin_asks_inline_and_then_runs(tmp_path, script, expected):
    import os

    from jupyter_client.manager import start_new_kernel
    from kernel_helpers import isolated_env

    work = tmp_path / "work"
    work.mkdir()
    (work / "toolkernel.toml").write_text(CONFIG)
    env = {**os.environ, **isolated_env(tmp_path)}
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(work), env=env)
    try:
        prompts, out = [], []

        def answer(msg):
            prompts.append(msg["content"]["prompt"])
            kc.input("o")

        def collect(msg):
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])

        kc.execute_interactive("%load_ext toolkernel", timeout=120)
        reply = kc.execute_interactive(f"%%tools\n{script}", allow_stdin=True, stdin_hook=answer,
                                       output_hook=collect, timeout=120)
        assert reply["content"]["status"] == "ok", out
        # The question is shown once, for the buttons; the prompt under it asks for the answer.
        assert prompts == ["Allow? [o]nce / [a]lways / [d]eny (no default): "]
        assert "".join(out) == expected
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@pytest.mark.slow
def test_python_api_help_is_text_and_errors_keep_their_class(session, monkeypatch):
    import toolkernel

    monkeypatch.setattr(toolkernel, "_default_session", session)
    assert "list-pulls" in toolkernel.call("github", "--help")
    with pytest.raises(toolkernel.UnknownCommand, match="did you mean github"):
        toolkernel.call("githb", "--help")
    with pytest.raises(toolkernel.InvalidInput, match="number"):
        toolkernel.call("github", "get-pull", repo="acme/api", number="x")
    assert toolkernel.call("github", "get-pull", repo="acme/api", number=101)["number"] == 101


def test_one_parser_and_one_usage_for_every_tools_word(session):
    text = manage(session, ["pair", "--help"])
    assert text == manage(session, ["--help"]) == manage(session, ["approve", "-h"])
    for words in ("%tools approve [--always]", "%tools deny", "%tools approvals [--revoke",
                  "%tools pair NOTEBOOK --kernel NAME", "%tools unpair"):
        assert words in text
    with pytest.raises(UsageError, match="unrecognized arguments: --colour"):
        manage(session, ["pair", "nb.ipynb", "--colour", "red"])
    with pytest.raises(UsageError, match="--kernel needs a value"):
        manage(session, ["pair", "nb.ipynb", "--kernel="])


@pytest.mark.slow
def test_the_notebook_answers_a_request_a_serve_client_waits_on(tmp_path):
    """`%tools approve ID` in the notebook's kernel answers what `toolkernel serve` (another process) published."""
    import anyio

    from approval_helpers import recorder_server_section
    from test_serve import bash, connected, project, recorded
    from test_serve import run as run_async

    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record))
    notebook = Session(work)
    script = "b=old\ntools github delete_branch branch=$b"
    said = {}

    async def body():
        async with connected(work) as client:
            first = await bash(client, script)
            request = first.structured_content["waiting"][0]["id"]
            with pytest.raises(UsageError, match="not a request id"):
                manage(notebook, ["approve", "../approvals"])
            said["approve"] = await anyio.to_thread.run_sync(manage, notebook, ["approve", request])
            return await bash(client, script)

    try:
        again = run_async(body)
    finally:
        notebook.close()
    assert said["approve"].startswith("allowed once: tools github delete-branch")
    assert again.structured_content["exit_code"] == 0
    assert [r["tool"] for r in recorded(record)] == ["delete_branch"]
