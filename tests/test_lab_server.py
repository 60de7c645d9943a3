"""toolkernel's Jupyter Server extension (`_frontends/_lab_server.py`) against a real Jupyter Server on
loopback, enabled by the jupyter-config file the package installs, and a real `toolkernel serve`
driven by the `mcp` SDK's client without elicitation: the list of calls waiting under the server's
root, an answer through it (the same rules as `toolkernel approve`), nothing without the server's
token, and nothing granted by a planted or rewritten pending file."""

from __future__ import annotations

import json
import os
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest

from approval_helpers import policy_section, recorder_server_section
from mcp_client import over_stdio
from jupyter_server_helpers import NO_COLLABORATION, start_server, stop_server
from test_pending import entry, plant
from test_serve import bash, connected, pending_ids, recorded, run, server_env
from toolkernel._approval._pending import PendingStore
from toolkernel._approval._policy import CallInfo
from toolkernel._mcp_sdk import StdioServerParameters

SCRIPT = "b=main\ntools github delete_branch branch=$b && echo deleted"


@pytest.fixture(scope="module")
def jupyter_server(tmp_path_factory):
    # Only the package's own config enables toolkernel here: this server is told nothing about it.
    process, server = start_server(tmp_path_factory, f"--ServerApp.jpserver_extensions={NO_COLLABORATION}")
    yield server
    stop_server(process)


def lab_api(server, method: str, path: str = "", token: str | None = "", **kwargs) -> httpx.Response:
    token = server["token"] if token == "" else token
    headers = {"Authorization": f"token {token}"} if token is not None else {}
    return httpx.request(method, server["url"] + "toolkernel/pending" + path, headers=headers, timeout=60, **kwargs)


def listed(server) -> list[dict]:
    response = lab_api(server, "GET")
    assert response.status_code == 200, response.text
    return response.json()["requests"]


def lab_answer(server, project: str, request_id: str, decision: str) -> httpx.Response:
    return lab_api(server, "POST", f"/{request_id}", json={"project": project, "decision": decision})


def project_under(server, name: str, record: Path) -> Path:
    work = Path(server["root"]) / name
    work.mkdir()
    (work / "toolkernel.toml").write_text(recorder_server_section(record))
    return work


@pytest.mark.parametrize("decision", ["once", "always", "deny"])
def test_an_agents_waiting_call_is_listed_and_answered_through_the_server(jupyter_server, tmp_path, decision):
    record = tmp_path / "record.jsonl"
    work = project_under(jupyter_server, f"answered-{decision}", record)
    seen = {}

    async def body():
        async with connected(work) as client:  # no elicitation: the call waits for a person
            first = await bash(client, SCRIPT)
            seen["listed"] = await anyio.to_thread.run_sync(listed, jupyter_server)
            request = first.structured_content["waiting"][0]["id"]
            seen["answered"] = await anyio.to_thread.run_sync(lab_answer, jupyter_server, work.name, request, decision)
            seen["after"] = await anyio.to_thread.run_sync(listed, jupyter_server)
            return first, await bash(client, SCRIPT), await bash(client, SCRIPT)

    first, again, third = run(body)
    request = first.structured_content["waiting"][0]
    shown = [r for r in seen["listed"] if r["project"] == work.name]
    assert [r["id"] for r in shown] == [request["id"]]
    assert shown[0]["call"] == {"tool": "tools github delete-branch", "input": {"branch": "main"}}
    assert shown[0]["alive"] is True and shown[0]["always"] == "mcp_github__delete_branch"
    assert "in JupyterLab" in first.content[0].text  # the agent is told where its person answers
    said = seen["answered"]
    assert said.status_code == 200, said.text
    assert said.json()["message"].startswith({"once": "allowed once", "always": "always allowed",
                                              "deny": "denied"}[decision])
    assert all(r["id"] != request["id"] for r in seen["after"])  # answered: no longer shown
    if decision == "deny":
        assert again.structured_content["tools"]["stopped"]["reason"] == "needs_approval"
        assert recorded(record) == []
    else:
        assert again.structured_content["exit_code"] == 0 and "deleted" in again.structured_content["stdout"]
        assert (third.structured_content["exit_code"] == 0) is (decision == "always")  # once: that call, once
    if decision == "always":
        assert "mcp_github__delete_branch" in (work / ".toolkernel" / "approvals.json").read_text()


def test_without_the_servers_token_nothing_is_listed_or_answered(jupyter_server, tmp_path):
    work = Path(jupyter_server["root"]) / "no-token"
    work.mkdir()
    store = PendingStore(work)
    request = store.publish(CallInfo("mcp_github__delete_branch", "tools github delete-branch", {"branch": "x"},
                                     "execute"), "the mode asks")
    for token in (None, "not-the-token"):
        assert lab_api(jupyter_server, "GET", token=token).status_code == 403
        posted = lab_api(jupyter_server, "POST", f"/{request.id}", token=token,
                         json={"project": "no-token", "decision": "once"})
        assert posted.status_code == 403
    assert store.answer_for(request) is None
    # With the token: listed, and the reply holds nothing of the server's token.
    reply = lab_api(jupyter_server, "GET")
    assert request.id in reply.text and jupyter_server["token"] not in reply.text
    store.withdraw(request.id)


def test_only_projects_under_the_root_are_listed_or_answered(jupyter_server, tmp_path):
    call = CallInfo("mcp_github__delete_branch", "tools github delete-branch", {"branch": "y"}, "execute")
    outside = tmp_path / "outside-the-root"
    outside.mkdir()
    away = PendingStore(outside).publish(call, "the mode asks")
    inside = Path(jupyter_server["root"]) / "inside"
    inside.mkdir()
    # A request planted in this project's folder that claims to be another project's (under the root).
    claim = Path(jupyter_server["root"]) / "claimed"
    plant(inside, "bbbbbbbbbbbb.json", entry("bbbbbbbbbbbb", project=str(claim)))
    try:
        shown = {(r["project"], r["id"]) for r in listed(jupyter_server)}
        assert all(rid != away.id for _, rid in shown)
        assert ("claimed", "bbbbbbbbbbbb") not in shown
        relative = os.path.relpath(outside, jupyter_server["root"])
        refused = lab_answer(jupyter_server, relative, away.id, "once")
        assert refused.status_code == 409 and "under the server's root" in refused.json()["message"]
        assert PendingStore(outside).answer_for(away) is None
    finally:
        PendingStore(outside).withdraw(away.id)


def test_a_planted_or_rewritten_request_answered_in_lab_grants_nothing(jupyter_server, tmp_path):
    record = tmp_path / "record.jsonl"
    work = project_under(jupyter_server, "planted", record)
    forged = "aaaaaaaaaaaa"  # a request naming exactly the call the agent makes, in the agent's project
    plant(work, f"{forged}.json", entry(forged, project=str(work.resolve())))
    seen = {}

    async def body():
        async with connected(work) as client:
            first = await bash(client, SCRIPT)
            genuine = first.structured_content["waiting"][0]["id"]
            # Another program rewrites the genuine entry to show a harmless call; the person allows
            # what Lab shows, and answers the planted one too.
            path = PendingStore(work).folder / f"{genuine}.json"
            data = json.loads(path.read_text())
            data["input"] = {"branch": "harmless"}
            path.write_text(json.dumps(data))
            seen["listed"] = await anyio.to_thread.run_sync(listed, jupyter_server)
            seen["rewritten"] = await anyio.to_thread.run_sync(lab_answer, jupyter_server, "planted", genuine, "once")
            seen["planted"] = await anyio.to_thread.run_sync(lab_answer, jupyter_server, "planted", forged, "once")
            again = await bash(client, SCRIPT)
            seen["waiting"] = pending_ids(work)
            return first, again

    first, again = run(body)
    shown = {r["id"]: r for r in seen["listed"] if r["project"] == "planted"}
    genuine = first.structured_content["waiting"][0]["id"]
    assert shown[genuine]["call"]["input"] == {"branch": "harmless"}  # Lab shows what the files say...
    assert forged in shown
    assert seen["rewritten"].status_code == 200 and seen["planted"].status_code == 200
    # ...and the agent's call, which the person never saw, is not allowed by it, nor by the planted file.
    for result in (first, again):
        assert result.structured_content["tools"]["stopped"]["reason"] == "needs_approval"
    assert recorded(record) == []
    assert genuine in seen["waiting"]  # the agent's call still waits for its person


@asynccontextmanager
async def connected_with(work: Path, env: dict[str, str]):
    """serve with the environment a Jupyter Server hands what it starts (Jupyter AI's MCP servers)."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "toolkernel", "serve"], env=env, cwd=str(work))
    async with over_stdio(params) as client:
        yield client


def test_the_servers_token_reaches_no_agent(jupyter_server, tmp_path):
    """serve started with the server's token in its environment: nothing the agent reads carries it,
    not its script's environment, not a command tool's (run in the OS sandbox), not the question it
    waits on, nor what Lab lists."""
    token = jupyter_server["token"]
    work = Path(jupyter_server["root"]) / "token"
    work.mkdir()
    (work / "toolkernel.toml").write_text(recorder_server_section(tmp_path / "record.jsonl")
                                          + '[tools.showenv]\ncommand = ["env"]\n'
                                          + policy_section(allow=["tool__showenv"]))
    seen = {}

    async def body():
        async with connected_with(work, {**server_env(), "JUPYTER_TOKEN": token, "JPY_API_TOKEN": token}) as client:
            result = await bash(client, "env\ntools showenv\n" + SCRIPT)
            seen["files"] = [p.read_text() for p in PendingStore(work).folder.glob("*.json")]
            seen["listed"] = await anyio.to_thread.run_sync(lambda: lab_api(jupyter_server, "GET").text)
            return result

    result = run(body)
    said = json.dumps(result.structured_content) + "".join(c.text for c in result.content if c.type == "text")
    assert "PATH=" in said and result.structured_content["waiting"]  # the environments were printed; it waits
    assert token not in said
    assert seen["files"] and not any(token in text for text in seen["files"])
    assert result.structured_content["waiting"][0]["id"] in seen["listed"] and token not in seen["listed"]


def test_a_root_under_the_home_folder_lists_its_requests(tmp_path, monkeypatch):
    """Jupyter Server spells a root under the home folder `~/project` in its settings (the common case:
    a person's project in their home): the list must read it as the folder it names."""
    from toolkernel._frontends._lab_server import listing, server_root

    monkeypatch.setenv("HOME", str(tmp_path))
    project = tmp_path / "project"
    project.mkdir()
    plant(project, "aaaaaaaaaaaa.json", entry("aaaaaaaaaaaa", project=str(project)))
    root = server_root({"server_root_dir": "~/project"})
    assert root == str(project)
    assert [request["id"] for request in listing(root)["requests"]] == ["aaaaaaaaaaaa"]
