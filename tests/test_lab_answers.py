"""Issue 48, items 1 and 2, on the kernel's side, through a real kernel: a page of JupyterLab with
the extension says it shows the question and answers it over the control channel, so no stdin
request is ever made; any other front end gets the text prompt at once. Before the start, every
call that needs a person is one question, answered for all or a call at a time."""

from __future__ import annotations

import queue
import time

import pytest
from approval_helpers import WAIT, Kernel, demo_server_section, kernel_env, write_project

from toolkernel._frontends._lab import APPROVAL_MIME, CONTROL_REPLY, CONTROL_REQUEST

TWO_CALLS = "%%tools\ntools write-file path=notes.txt content=hi\ntools github delete-branch branch=fix-x\necho ran\n"
LAB_METADATA = {"deletedCells": [], "recordTiming": False, "cellId": "c1"}  # what JupyterLab sends with a cell


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    workdir = write_project(tmp_path_factory.mktemp("lab-answers") / "project", demo_server_section()).parent
    started = Kernel(workdir, kernel_env(workdir))
    yield started
    started.close()


class Page:
    """What the extension does with a cell: sends it, reads its outputs, answers on control."""

    def __init__(self, kernel: Kernel) -> None:
        self.client = kernel.client

    def send(self, code: str, metadata: dict) -> str:
        msg = self.client.session.msg("execute_request", {"code": code, "silent": False, "store_history": True,
                                                          "user_expressions": {}, "allow_stdin": True,
                                                          "stop_on_error": True}, metadata=metadata)
        self.client.shell_channel.send(msg)
        return msg["header"]["msg_id"]

    def control(self, content: dict) -> dict:
        self.client.control_channel.send(self.client.session.msg(CONTROL_REQUEST, content))
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            reply = self.client.control_channel.get_msg(timeout=WAIT)
            if reply["msg_type"] == CONTROL_REPLY:
                return reply["content"]
        raise AssertionError("no reply on the control channel")

    def until(self, msg_id: str, predicate, stdin: list | None = None) -> dict:
        """The first iopub message of the cell that `predicate` takes; stdin requests meanwhile are kept."""
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if stdin is not None:
                try:
                    stdin.append(self.client.stdin_channel.get_msg(timeout=0.05))
                except queue.Empty:
                    pass
            try:
                msg = self.client.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") == msg_id and predicate(msg):
                return msg
        raise AssertionError("the cell never said it")

    def outputs_until_idle(self, msg_id: str, stdin: list) -> list[dict]:
        seen: list[dict] = []
        self.until(msg_id, lambda m: seen.append(m) or (m["msg_type"] == "status"
                                                       and m["content"]["execution_state"] == "idle"), stdin)
        return seen


def _question(msg) -> dict | None:
    return msg["content"].get("data", {}).get(APPROVAL_MIME) if msg["msg_type"] == "display_data" else None


def test_a_page_with_the_extension_answers_one_question_for_every_call_over_the_control_channel(kernel):
    page = Page(kernel)
    stdin: list = []
    cell = page.send(TWO_CALLS, LAB_METADATA)
    question = _question(page.until(cell, _question, stdin))
    assert [line["call"]["tool"] for line in question["calls"]] == ["tools write-file", "tools github delete-branch"]
    assert all(line["reason"] for line in question["calls"])
    assert 'mode = "accept-edits"' in question["hint"]
    assert page.control({"action": "seen", "question": question["id"]}) == {"ok": True}
    assert page.control({"action": "answer", "question": "not-this-one", "reply": "o"})["ok"] is False
    assert page.control({"action": "answer", "question": question["id"], "reply": "oa"}) == {"ok": True}
    outputs = page.outputs_until_idle(cell, stdin)
    text = "".join(m["content"].get("text", "") for m in outputs if m["msg_type"] == "stream")
    assert "allowed once and always allowed (2 calls); running the script" in text and "ran" in text, text
    assert stdin == []  # no stdin request: no box under the buttons
    [ended] = [m["content"]["data"][APPROVAL_MIME] for m in outputs if m["msg_type"] == "update_display_data"]
    assert ended["answered"] == ["once", "always"]
    assert (kernel.workdir / "notes.txt").read_text() == "hi"
    assert "mcp_github__delete_branch" in (kernel.workdir / ".toolkernel" / "approvals.json").read_text()
    assert page.control({"action": "answer", "question": question["id"], "reply": "o"})["ok"] is False  # ended


def test_another_front_end_gets_the_text_prompt_at_once(kernel):
    page = Page(kernel)
    stdin: list = []
    two = "%%tools\ntools write-file path=n2.txt content=ho\ntools github create-issue title=T\necho ran\n"
    cell = page.send(two, {})  # nbclient, VS Code, the console: no keys of JupyterLab
    page.until(cell, _question)
    deadline = time.monotonic() + WAIT
    while not stdin and time.monotonic() < deadline:
        try:
            stdin.append(page.client.stdin_channel.get_msg(timeout=0.5))
        except queue.Empty:
            pass
    assert stdin and "or a letter a call in order" in stdin[0]["content"]["prompt"]
    page.client.input("d")
    text = "".join(m["content"].get("text", "") for m in page.outputs_until_idle(cell, []) if m["msg_type"] == "stream")
    assert text == "denied; nothing ran\n" and not (kernel.workdir / "n2.txt").exists()


def test_an_interrupt_cancels_a_question_the_page_shows_and_nothing_waits(kernel):
    page = Page(kernel)
    stdin: list = []
    cell = page.send("%%tools\ntools write-file path=other.txt content=x\n", LAB_METADATA)
    question = _question(page.until(cell, _question, stdin))
    assert page.control({"action": "seen", "question": question["id"]}) == {"ok": True}
    kernel.manager.interrupt_kernel()
    outputs = page.outputs_until_idle(cell, stdin)
    [ended] = [m["content"]["data"][APPROVAL_MIME] for m in outputs if m["msg_type"] == "update_display_data"]
    assert ended["answered"] == "cancelled" and stdin == []
    assert not (kernel.workdir / "other.txt").exists()


def test_an_interrupt_of_a_question_about_several_calls_names_the_first_and_ends_it(kernel):
    page = Page(kernel)
    stdin: list = []
    two = "%%tools\ntools write-file path=a1.txt content=x\ntools github create-issue title=U\n"
    cell = page.send(two, LAB_METADATA)
    question = _question(page.until(cell, _question, stdin))
    assert page.control({"action": "seen", "question": question["id"]}) == {"ok": True}
    kernel.manager.interrupt_kernel()
    outputs = page.outputs_until_idle(cell, stdin)
    [ended] = [m["content"]["data"][APPROVAL_MIME] for m in outputs if m["msg_type"] == "update_display_data"]
    assert ended["answered"] == "cancelled" and stdin == []
    [error] = [m["content"] for m in outputs if m["msg_type"] == "error"]
    assert "interrupted while a person was asked about tools write-file" in error["evalue"], error
    assert not (kernel.workdir / "a1.txt").exists()
