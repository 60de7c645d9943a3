"""Issue 47 item 3 in a real browser: the question a `toolkernel serve` asks is shown in JupyterLab
whatever the agent does. One JupyterLab for the module (toolkernel's server extension enabled by the
package's own config), Debian's Chromium through Playwright, and a real `toolkernel serve` under
the Lab's root driven by the `mcp` SDK's client (the agent), on a thread of its own: with no
elicitation the call waits in the pending store, Lab notifies, and Allow once lets the agent's next
script through; with a client that forwards elicitation, answering in Lab cancels the client's
question and the call goes on; Deny leaves the workspace as it was."""

from __future__ import annotations

import concurrent.futures
import queue
import tempfile
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from toolkernel._mcp_sdk import types
from approval_helpers import recorder_server_section
from test_browser import WAIT_MS, Steps, browser_ready, chromium, running_lab  # noqa: F401
from test_serve import bash, connected, recorded

SCRIPT = "b=main\ntools github delete_branch branch=$b && echo deleted"  # asks mid-run (its input is built)
# Asks before it starts (a literal call): nothing of it runs until the person answers.
WRITES_THEN_DELETES = "echo changed > notes.txt\ntools github delete_branch branch=main && echo deleted"
CALL = 'tools github delete-branch {"branch": "main"}'
AGENT_WAIT = 180  # seconds: one agent's call on a loaded, shared machine


@pytest.fixture(scope="module")
def shared_lab(browser_ready, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lab-pending")
    root = tmp / "root"
    root.mkdir()
    with running_lab(tmp, root) as base:
        yield base, root


class Agent:
    """A real `toolkernel serve` (stdio) in `work` and the `mcp` SDK's client, on a thread of its own
    (the test clicks in the page meanwhile): `bash(script)` is a future of the call's result."""

    def __init__(self, work: Path, elicit=None) -> None:
        self.work, self.elicit = work, elicit
        self._calls: queue.Queue = queue.Queue()
        self._ready = concurrent.futures.Future()
        self._thread = threading.Thread(target=anyio.run, args=(self._serve,), daemon=True)
        self._thread.start()
        self._ready.result(timeout=AGENT_WAIT)

    async def _serve(self) -> None:
        try:
            async with connected(self.work, self.elicit) as client:
                self._ready.set_result(None)
                while (item := await anyio.to_thread.run_sync(self._calls.get)) is not None:
                    script, result = item
                    try:
                        result.set_result(await bash(client, script))
                    except Exception as exc:  # noqa: BLE001 - the test reads it from the future
                        result.set_exception(exc)
        except Exception as exc:  # noqa: BLE001
            if not self._ready.done():
                self._ready.set_exception(exc)
            raise

    def bash(self, script: str) -> concurrent.futures.Future:
        result: concurrent.futures.Future = concurrent.futures.Future()
        self._calls.put((script, result))
        return result

    def close(self) -> None:
        self._calls.put(None)
        self._thread.join(timeout=AGENT_WAIT)


class Page:
    def __init__(self, chromium, base: str, name: str) -> None:
        from playwright.sync_api import expect

        self.expect = expect
        self.context = chromium.new_context(viewport={"width": 1400, "height": 1000})  # a profile of its own
        self.page = self.context.new_page()
        self.page.set_default_timeout(WAIT_MS)
        expect.set_options(timeout=WAIT_MS)
        self.steps = Steps(self.page, Path(tempfile.mkdtemp(prefix=f"toolkernel-lab-{name}-")))
        print(f"\nscreenshots: {self.steps.artifacts}")
        self.page.goto(f"{base}/lab/workspaces/{name}?reset")
        expect(self.page.locator('.jp-SideBar [data-id="toolkernel-tools"]')).to_be_visible()

    def question(self, call: str):
        """The notification that asks about `call` (not the one that says what an answer did)."""
        return self.page.locator(".Toastify__toast").filter(has_text="An agent asks").filter(has_text=call)

    def waiting_list(self):
        tab = self.page.locator('.jp-SideBar [data-id="toolkernel-tools"]')
        if tab.get_attribute("aria-selected") != "true":
            tab.click()
        return self.page.locator("#toolkernel-tools .toolkernel-waiting")

    def close(self) -> None:
        self.context.close()


def _project(root: Path, name: str, record: Path) -> Path:
    work = root / name
    work.mkdir()
    (work / "toolkernel.toml").write_text(recorder_server_section(record))  # the default mode asks
    return work


def test_an_agent_that_cannot_elicit_is_answered_from_the_notification(shared_lab, chromium, tmp_path):
    base, root = shared_lab
    record = tmp_path / "record.jsonl"
    work = _project(root, "no-elicitation", record)
    agent, lab = Agent(work), Page(chromium, base, "no-elicitation")
    expect, steps = lab.expect, lab.steps
    try:
        first = agent.bash(SCRIPT).result(timeout=AGENT_WAIT).structured_content
        assert first["tools"]["stopped"]["reason"] == "needs_approval" and first["waiting"]
        toast = lab.question(CALL)
        expect(toast).to_be_visible()
        listed = lab.waiting_list()
        expect(listed).to_contain_text("Waiting for you (1)")
        expect(listed.locator(".toolkernel-waiting-call")).to_have_text(CALL)
        expect(listed.locator(".toolkernel-waiting-where")).to_contain_text("no-elicitation")
        steps.shot("notified")
        toast.get_by_role("button", name="Allow once").click()
        expect(lab.page.locator(".Toastify__toast").filter(has_text="allowed once")).to_be_visible()
        expect(toast).to_have_count(0)  # answered: the question goes
        expect(listed.locator(".toolkernel-waiting-request")).to_have_count(0)
        steps.shot("allowed-once")
        again = agent.bash(SCRIPT).result(timeout=AGENT_WAIT).structured_content
        assert again["exit_code"] == 0 and "deleted" in again["stdout"], again
        assert recorded(record) == [{"tool": "delete_branch", "input": {"branch": "main"}}]
    except Exception:
        steps.shot("failure")
        raise
    finally:
        agent.close()
        lab.close()


def never_answers(asked: list, cancelled: threading.Event):
    """A client that forwards elicitation to a person who does not answer there; serve's cancel is seen."""

    async def elicit(context: Any, params) -> Any:
        asked.append(params.message)
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()

    return elicit


@pytest.mark.parametrize("decision", ["Allow once", "Deny"])
def test_answering_in_lab_makes_the_clients_elicitation_go_away(shared_lab, chromium, tmp_path, decision):
    base, root = shared_lab
    record = tmp_path / "record.jsonl"
    name = f"elicitation-{decision.split()[0].lower()}"
    work = _project(root, name, record)
    (work / "notes.txt").write_text("as the person left it\n")
    asked: list = []
    cancelled = threading.Event()
    agent, lab = Agent(work, never_answers(asked, cancelled)), Page(chromium, base, name)
    expect, steps = lab.expect, lab.steps
    try:
        result = agent.bash(WRITES_THEN_DELETES)
        listed = lab.waiting_list()
        request = listed.locator(".toolkernel-waiting-request").filter(has_text=CALL)
        expect(request).to_be_visible()  # in Lab while the client is asked
        assert len(asked) == 1 and not result.done()
        steps.shot("asked-in-both")
        request.get_by_role("button", name=decision, exact=True).click()
        done = result.result(timeout=AGENT_WAIT).structured_content
        assert cancelled.wait(AGENT_WAIT)  # the client's question was cancelled
        expect(request).to_have_count(0)
        expect(lab.question(CALL)).to_have_count(0)
        expect(lab.page.locator("#toolkernel-tools .toolkernel-said")).to_contain_text(
            "allowed once" if decision == "Allow once" else "denied")
        steps.shot("answered-in-lab")
        if decision == "Allow once":  # before the start: the script runs in the same call
            assert done["exit_code"] == 0 and "deleted" in done["stdout"], done
            assert recorded(record) == [{"tool": "delete_branch", "input": {"branch": "main"}}]
            assert (work / "notes.txt").read_text() == "changed\n"
        else:  # nothing ran: the workspace is as it was
            assert done["tools"]["stopped"]["approval"] == "denied", done
            assert recorded(record) == [] and (work / "notes.txt").read_text() == "as the person left it\n"
    except Exception:
        steps.shot("failure")
        raise
    finally:
        agent.close()
        lab.close()


def test_answering_through_the_client_takes_the_question_out_of_lab(shared_lab, chromium, tmp_path):
    base, root = shared_lab
    record = tmp_path / "record.jsonl"
    work = _project(root, "elicitation-answered", record)
    shown_in_lab = threading.Event()

    async def answers_once_lab_shows_it(context: Any, params) -> Any:
        await anyio.to_thread.run_sync(shown_in_lab.wait, AGENT_WAIT)
        return types.ElicitResult(action="accept", content={"decision": "once"})

    agent, lab = Agent(work, answers_once_lab_shows_it), Page(chromium, base, "elicitation-answered")
    expect, steps = lab.expect, lab.steps
    try:
        result = agent.bash(WRITES_THEN_DELETES)
        request = lab.waiting_list().locator(".toolkernel-waiting-request").filter(has_text=CALL)
        expect(request).to_be_visible()
        expect(lab.question(CALL)).to_be_visible()
        shown_in_lab.set()  # the person answers at the agent's side
        done = result.result(timeout=AGENT_WAIT).structured_content
        assert done["exit_code"] == 0 and "deleted" in done["stdout"], done
        expect(request).to_have_count(0)  # the Lab's question goes: the sidebar's and the notification
        expect(lab.question(CALL)).to_have_count(0)
        steps.shot("answered-through-the-client")
    except Exception:
        steps.shot("failure")
        raise
    finally:
        shown_in_lab.set()
        agent.close()
        lab.close()
