"""The pending store under the state folder (`pending/<project>/`), read as untrusted input.

Real processes: `toolkernel serve` (through the `mcp` SDK's client, with no
elicitation) publishes the calls that wait; `toolkernel approve` in another
process lists and answers them. The attacks: files planted in the folder
(a cloned repository, another program of this user), a genuine request
rewritten to show another call, ids that climb out of the folder, and names
or inputs that carry terminal control sequences.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest

from approval_helpers import policy_section, recorder_server_section
from test_serve import approve_cli, bash, connected, pending_ids, project, recorded, run
from toolkernel._approval._pending import PendingStore
from toolkernel._approval._policy import CallInfo, canonical_call_key

SCRIPT = "b=main\ntools github delete_branch branch=$b && echo deleted"


def plant(work: Path, name: str, body, mode: int = 0o600) -> Path:
    folder = PendingStore(work).folder
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(body if isinstance(body, str) else json.dumps(body))
    os.chmod(path, mode)
    return path


def entry(request_id: str, tool: str = "mcp_github__delete_branch", input=None, **extra) -> dict:
    return {"version": 1, "id": request_id, "tool": tool, "input": input or {"branch": "main"},
            "kind": "execute", "reason": "the mode asks", "created": "2026-11-30T10:00:00+00:00",
            "pid": os.getpid(), **extra}


def answer(request_id: str, decision: str, tool="mcp_github__delete_branch", input=None) -> dict:
    return {"version": 1, "id": request_id, "answer": decision,
            "call": canonical_call_key(tool, input or {"branch": "main"})}


@pytest.mark.slow
def test_a_planted_request_and_answer_grant_nothing(tmp_path):
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record))
    forged = "aaaaaaaaaaaa"
    # A request and its "once" answer, naming exactly the call the agent is about to make.
    plant(work, f"{forged}.json", entry(forged))
    plant(work, f"{forged}.answer.json", answer(forged, "once"))

    async def body():
        async with connected(work) as client:
            first = await bash(client, SCRIPT)
            # The person is even shown the planted one, and answers it: still no grant to the agent.
            await anyio.to_thread.run_sync(approve_cli, work, forged, "once")
            return first, await bash(client, SCRIPT)

    first, again = run(body)
    for result in (first, again):
        assert result.structured_content["tools"]["stopped"]["reason"] == "needs_approval"
    assert recorded(record) == []


@pytest.mark.slow
def test_a_rewritten_request_shows_one_call_and_grants_nothing_else(tmp_path):
    """The agent's call waits; another program rewrites its entry to show a harmless call.
    The person allows what they see; the waiting call stays unallowed."""
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record))
    seen = {}

    async def body():
        async with connected(work) as client:
            first = await bash(client, SCRIPT)
            request = first.structured_content["waiting"][0]["id"]
            plant(work, f"{request}.json", entry(request, "mcp_github__list_pulls", {"repo": "docs"}))
            seen["listed"] = await anyio.to_thread.run_sync(approve_cli, work)
            seen["once"] = await anyio.to_thread.run_sync(approve_cli, work, request, "once")
            return await bash(client, SCRIPT)

    again = run(body)
    assert 'tools github list-pulls {"repo": "docs"}' in seen["listed"].stdout  # what the person saw
    assert seen["once"].returncode == 0
    assert again.structured_content["tools"]["stopped"]["reason"] == "needs_approval"
    assert recorded(record) == []


@pytest.mark.slow
def test_always_on_a_rewritten_request_allows_only_the_tool_the_person_saw(tmp_path):
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record))

    async def body():
        async with connected(work) as client:
            first = await bash(client, SCRIPT)
            request = first.structured_content["waiting"][0]["id"]
            plant(work, f"{request}.json", entry(request, "mcp_github__create_issue", {"title": "hi"}))
            said = await anyio.to_thread.run_sync(approve_cli, work, request, "always")
            return said, await bash(client, SCRIPT)

    said, again = run(body)
    assert said.returncode == 0 and "mcp_github__create_issue" in said.stdout
    rules = [e["rule"] for e in json.loads((work / ".toolkernel" / "approvals.json").read_text())["allow"]]
    assert rules == ["mcp_github__create_issue"]
    assert again.structured_content["tools"]["stopped"]["reason"] == "needs_approval"
    assert recorded(record) == []


@pytest.mark.slow
def test_the_list_skips_what_it_cannot_trust_and_escapes_what_it_shows(tmp_path):
    work = project(tmp_path, "")
    plant(work, "bbbbbbbbbbbb.json", entry("bbbbbbbbbbbb", input={"branch": "x\x1b[2K\x1b[1Agone\u202e"}))
    plant(work, "cccccccccccc.json", entry("cccccccccccc", tool="mcp_github__x\x1b[31m"))
    plant(work, "dddddddddddd.json", entry("dddddddddddd", tool="mcp_github"))  # a whole server
    plant(work, "eeeeeeeeeeee.json", entry("ffffffffffff"))  # the id is not its name
    plant(work, "111111111111.json", entry("111111111111"), mode=0o666)  # anyone may write it
    plant(work, "222222222222.json", "{not json")
    plant(work, "444444444444.json", "[" * 100_000 + "]" * 100_000)  # past the parser's depth
    target = plant(work, "target.txt", json.dumps(entry("333333333333")))
    os.symlink(target, PendingStore(work).folder / "333333333333.json")

    listed = approve_cli(work)
    assert listed.returncode == 0, listed.stderr
    out = listed.stdout
    assert "\x1b" not in out and "\u202e" not in out
    assert "bbbbbbbbbbbb" in out and "\\u001b[2K" in out  # shown, escaped
    for skipped in ("cccccccccccc", "dddddddddddd", "eeeeeeeeeeee", "111111111111", "222222222222",
                    "333333333333", "444444444444"):
        assert f"ignored {skipped}.json" in out, out
    assert out.count("tools github delete-branch {") == 1  # one request shown (its "always" line names it too)
    for bad in ("cccccccccccc", "dddddddddddd", "111111111111", "333333333333"):
        answered = approve_cli(work, bad, "always")
        assert answered.returncode == 1 and "Traceback" not in answered.stderr
    assert not (work / ".toolkernel" / "approvals.json").exists()


@pytest.mark.slow
def test_an_id_cannot_leave_the_folder(tmp_path):
    work = project(tmp_path, "")
    (work / ".toolkernel").mkdir()
    victim = work / ".toolkernel" / "approvals.json"
    plant(work, "aaaaaaaaaaaa.json", entry("aaaaaaaaaaaa"))
    for request in ("../approvals", "../../toolkernel.toml", "aaaaaaaaaaaa/../aaaaaaaaaaaa", "AAAAAAAAAAAA"):
        answered = approve_cli(work, request, "always")
        assert answered.returncode == 1 and "not a request id" in answered.stderr
    assert not victim.exists() and (work / "toolkernel.toml").read_text() == ""


def test_always_is_refused_where_an_ask_rule_would_keep_asking(tmp_path):
    work = project(tmp_path, policy_section(ask=["mcp_github__delete_branch"]))
    plant(work, "aaaaaaaaaaaa.json", entry("aaaaaaaaaaaa"))
    assert "always would not let this call run unasked" in approve_cli(work).stdout
    answered = approve_cli(work, "aaaaaaaaaaaa", "always")
    assert answered.returncode == 1 and "answer once or deny" in answered.stderr
    assert not (work / ".toolkernel" / "approvals.json").exists()


@pytest.mark.slow
def test_a_server_that_ends_withdraws_its_requests(tmp_path):
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record))

    async def body():
        async with connected(work) as client:
            await bash(client, SCRIPT)
            await bash(client, SCRIPT)  # asked again: still one request
            return pending_ids(work)

    assert len(run(body)) == 1
    assert pending_ids(work) == []


@pytest.mark.slow
def test_a_request_whose_process_ended_is_marked_and_takes_no_once(tmp_path):
    import subprocess
    import sys

    work = project(tmp_path, "")
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                           text=True, timeout=60)
    plant(work, "aaaaaaaaaaaa.json", entry("aaaaaaaaaaaa", pid=int(ended.stdout)))
    assert "the process that asked has ended" in approve_cli(work).stdout
    once = approve_cli(work, "aaaaaaaaaaaa", "once")
    assert once.returncode == 1 and "answer always or deny" in once.stderr
    assert approve_cli(work, "aaaaaaaaaaaa", "deny").returncode == 0


def test_the_list_counts_in_words_a_person_reads(tmp_path):
    work = project(tmp_path, "")
    plant(work, "aaaaaaaaaaaa.json", entry("aaaaaaaaaaaa"))
    one = approve_cli(work).stdout
    assert "1 call waits for a person" in one
    assert "always allows tools github delete-branch from now on (the rule mcp_github__delete_branch)" in one
    plant(work, "bbbbbbbbbbbb.json", entry("bbbbbbbbbbbb", input={"branch": "other"}))
    assert "2 calls wait for a person" in approve_cli(work).stdout
    said = approve_cli(work, "aaaaaaaaaaaa", "always").stdout
    assert said.startswith('always allowed: tools github delete-branch {"branch": "main"} (the rule'
                           " mcp_github__delete_branch, saved in"), said


def test_a_file_is_private_when_it_appears_and_not_touched_after(tmp_path, monkeypatch):
    """The asker takes an answer the moment it appears (reads it, removes it): the answer must
    be written whole and 0o600 before its name is in place, with nothing done by name after.
    A fresh-clone CI run failed `toolkernel approve` so: its chmod after the rename found no file."""
    store = PendingStore(tmp_path)
    request = store.publish(CallInfo("mcp_github__delete_branch", "tools github delete_branch",
                                     {"branch": "main"}, "execute"), "the mode asks")
    real_replace, seen = os.replace, []

    def taken_at_once(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        seen.append(os.stat(src, dir_fd=src_dir_fd).st_mode & 0o777)
        real_replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
        if str(dst).endswith(".answer.json"):
            assert store.answer_for(request) == "once"
            os.unlink(dst, dir_fd=dst_dir_fd)  # what the asker does with an answer it took

    monkeypatch.setattr(os, "replace", taken_at_once)
    store.answer(request, "once")
    assert seen == [0o600]
