"""`toolkernel serve` asks a client that can elicit AND publishes the question where JupyterLab and
`toolkernel approve` answer it (`_approver.FirstAnswer`): the first answer counts, and the other
question goes. A real serve driven by the `mcp` SDK's client, whose elicitation callback stands for
the person at the agent's side; `toolkernel approve` in another process for the one elsewhere."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from toolkernel._mcp_sdk import types

from approval_helpers import policy_section, recorder_server_section
from mcp_client import Question
from test_serve import approve_cli, bash, connected, pending_ids, project, recorded, run

BEFORE_START = "tools github delete_branch branch=old && echo after"
MID_RUN = "b=old\ntools github delete_branch branch=$b\necho after"  # input built at run time


async def published(work) -> str:
    """The id of the request serve publishes while its client is asked."""
    while not (ids := pending_ids(work)):
        await anyio.sleep(0.05)
    return ids[0]


@pytest.mark.slow
@pytest.mark.parametrize("script", [BEFORE_START, MID_RUN], ids=["before-start", "mid-run"])
def test_an_answer_given_elsewhere_counts_and_the_clients_question_is_cancelled(tmp_path, script):
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record), policy_section(ask=["mcp_github__delete_branch"]))
    asked: list = []
    cancelled = anyio.Event()

    async def never_answers(context: Any, params: Question) -> types.ElicitResult:
        asked.append(params)
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()  # serve cancelled the elicitation: the client's form goes away

    async def body():
        async with connected(work, never_answers) as client:
            results = {}

            async def call():
                results["first"] = await bash(client, script)

            async with anyio.create_task_group() as group:
                group.start_soon(call)
                request = await published(work)
                answered = await anyio.to_thread.run_sync(approve_cli, work, request, "once")
                assert answered.returncode == 0, answered.stderr
                await cancelled.wait()
            results["waiting"] = pending_ids(work)
            if script == MID_RUN:  # the once-grant covers that call in the next script (another would ask again)
                results["again"] = await bash(client, script)
            return results

    results = run(body)
    assert len(asked) == 1 and cancelled.is_set()
    assert results["waiting"] == []  # taken by serve, which asked
    first = results["first"].structured_content
    if script == BEFORE_START:  # allowed before the start: the script runs in the same call
        assert first["exit_code"] == 0 and "after" in first["stdout"]
    else:  # mid-run: the script stopped there, and the once covers that call in the next script
        assert first["tools"]["stopped"]["approval"] == "granted"
        assert results["again"].structured_content["exit_code"] == 0
    assert recorded(record) == [{"tool": "delete_branch", "input": {"branch": "old"}}]


@pytest.mark.slow
@pytest.mark.parametrize("decision", ["once", "deny"])
def test_an_answer_through_the_client_removes_the_published_request(tmp_path, decision):
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record), policy_section(ask=["mcp_github__delete_branch"]))
    seen: dict[str, Any] = {}

    async def answers_once_both_ask(context: Any, params: Question) -> types.ElicitResult:
        seen["published"] = await published(work)  # the question waits in the store as well
        return types.ElicitResult(action="accept", content={"decision": decision})

    async def body():
        async with connected(work, answers_once_both_ask) as client:
            result = await bash(client, BEFORE_START)
            seen["after"] = pending_ids(work)
            seen["listed"] = await anyio.to_thread.run_sync(approve_cli, work)
            return result

    result = run(body).structured_content
    assert seen["published"] and seen["after"] == []
    assert "no call waits" in seen["listed"].stdout
    assert "waiting" not in result
    if decision == "once":
        assert result["exit_code"] == 0 and recorded(record) == [{"tool": "delete_branch", "input": {"branch": "old"}}]
    else:
        assert result["tools"]["stopped"]["approval"] == "denied" and recorded(record) == []


@pytest.mark.slow
def test_a_declined_elicitation_leaves_the_question_where_a_person_can_still_answer(tmp_path):
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record), policy_section(ask=["mcp_github__delete_branch"]))

    async def declines(context: Any, params: Question) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    async def body():
        async with connected(work, declines) as client:
            first = await bash(client, BEFORE_START)
            waiting = pending_ids(work)
            request = first.structured_content["waiting"][0]["id"]
            answered = await anyio.to_thread.run_sync(approve_cli, work, request, "once")
            return first, waiting, answered, await bash(client, BEFORE_START)

    first, waiting, answered, again = run(body)
    assert first.structured_content["tools"]["stopped"]["reason"] == "needs_approval"
    assert waiting == [first.structured_content["waiting"][0]["id"]]  # one request, not one per channel
    assert answered.returncode == 0, answered.stderr
    assert again.structured_content["exit_code"] == 0
    assert recorded(record) == [{"tool": "delete_branch", "input": {"branch": "old"}}]


@pytest.mark.slow
def test_an_agents_cell_answered_elsewhere_runs_and_the_clients_question_is_cancelled(tmp_path):
    """The paired kernel publishes its agent's cell; serve asks its client too. Answered in the store
    first (as JupyterLab does), the elicitation is cancelled and the cell runs."""
    from test_serve_notebook import POLICY, new_notebook, run_code, serving, text

    work = project(tmp_path, POLICY)
    new_notebook(work / "nb.ipynb")
    cancelled = anyio.Event()

    async def never_answers(context: Any, params: Question) -> types.ElicitResult:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()

    async def body():
        async with serving(work, "--notebook", "nb.ipynb", "--kernel", "python3", elicit=never_answers) as client:
            await run_code(client, "nb.ipynb", "%load_ext toolkernel")
            results = {}

            async def cell():
                results["ran"] = await run_code(client, "nb.ipynb", "%%bash\ntouch made.txt && echo made")

            async with anyio.create_task_group() as group:
                group.start_soon(cell)
                request = await published(work)
                answered = await anyio.to_thread.run_sync(approve_cli, work, request, "once")
                assert answered.returncode == 0, answered.stderr
            return results["ran"]

    ran = run(body)
    assert cancelled.is_set()
    assert not ran.is_error and "made" in text(ran), text(ran)
    assert (work / "made.txt").exists()
