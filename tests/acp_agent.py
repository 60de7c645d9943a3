"""A scripted, deterministic ACP agent: a test fixture standing in for Claude, Codex or Gemini in
Jupyter AI's chat (never part of the product).

Built on the `agent-client-protocol` SDK (`acp`), as real ACP agents are. Jupyter AI starts it
(the persona in tests/lab/jai_personas/toolkernel_agent_personas.py) and sends on `session/new`
the MCP servers of `.jupyter/mcp_settings.json`; it starts the stdio ones with the `mcp` SDK's
client, as an agent does (the SDK's default environment plus the entry's `env`, in the session's
folder). On each chat message it:

1. finds the notebook: an attached one (a `resource_link`, `file://...ipynb`) or the last
   `NAME.ipynb` the message names (from the server's root), and the code: the message's last
   `backticked` span;
2. reads the notebook (`notebook_read`) for its last cell's id;
3. inserts the code as a new cell after it and runs that cell, then says in the chat what came
   out (or what stopped it). Every MCP call shows in the chat as an ACP tool call.

Two modes, `--forward` or not:
- `--forward` offers the MCP client elicitation, and puts each question toolkernel elicits to the
  person as an ACP `session/request_permission` (the chat's buttons: Allow once / Always allow /
  Deny), with the direct tools `notebook_edit` and `notebook_run`;
- without it the client has no elicitation (as Jupyter AI's own ACP client has none), so a
  question must reach the person through toolkernel's own JupyterLab UI. It then runs one `bash`
  script in the background (`tools notebook-edit`, then `tools notebook-run` on the new cell's id),
  waits for serve's word that the run ended (a `notifications/message`), and reads the run's
  output with `bash_output`.

Run: `python tests/acp_agent.py [--forward]` (ACP on stdin/stdout; its log on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import shlex
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import acp  # noqa: E402
from acp import schema  # noqa: E402
from mcp_client import Client, Question, over_stdio  # noqa: E402

from toolkernel._mcp_sdk import StdioServerParameters, types  # noqa: E402

NOTEBOOK_NAMED = re.compile(r"[\w][\w./-]*\.ipynb")
CODE = re.compile(r"`([^`]+)`")
CELL_ID = re.compile(r"^--- cell \d+/\d+ id=(\S+)", re.MULTILINE)
# The ACP options a toolkernel elicitation's `decision` becomes (Jupyter AI shows them as buttons).
OPTIONS = {"once": ("Allow once", "allow_once"), "always": ("Always allow", "allow_always"),
           "deny": ("Deny", "reject_once")}


def log(*said: Any) -> None:
    print("acp_agent:", *said, file=sys.stderr, flush=True)


@dataclass
class Session:
    cwd: str
    servers: list[Any]
    client: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    runs_ended: asyncio.Queue = field(default_factory=asyncio.Queue)  # serve's word that a background run ended
    tool_call: str = ""  # the ACP tool call an elicitation is about
    turn: asyncio.Task | None = None


class ScriptedAgent:
    def __init__(self, forward: bool) -> None:
        self.forward = forward
        self.sessions: dict[str, Session] = {}
        self.conn: Any = None
        self._count = 0

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, client_capabilities: Any = None, client_info: Any = None,
                         **kwargs: Any) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=protocol_version,
            agent_capabilities=schema.AgentCapabilities(mcp_capabilities=schema.McpCapabilities(http=True)),
            agent_info=schema.Implementation(name="toolkernel-scripted-agent", version="1"))

    async def new_session(self, cwd: str, mcp_servers: list[Any] | None = None, **kwargs: Any) -> schema.NewSessionResponse:
        session_id = uuid.uuid4().hex
        session = self.sessions[session_id] = Session(cwd, list(mcp_servers or []))
        asyncio.create_task(self._host(session_id, session))
        log(f"session {session_id} in {cwd}: servers {[server.name for server in session.servers]}")
        return schema.NewSessionResponse(session_id=session_id)

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        return None

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self.sessions.get(session_id)
        if session and session.turn:
            session.turn.cancel()

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> schema.PromptResponse:
        session = self.sessions[session_id]
        session.turn = asyncio.current_task()
        log(f"prompt in session {session_id}")
        try:
            said = await self._turn(session_id, session, prompt)
        except asyncio.CancelledError:
            return schema.PromptResponse(stop_reason="cancelled")
        except Exception as exc:  # noqa: BLE001 - the person reads it in the chat
            log(f"turn failed: {exc!r}")
            said = f"Something failed: {type(exc).__name__}: {exc}"
        await self._say(session_id, said)
        return schema.PromptResponse(stop_reason="end_turn")

    # -- the MCP side --------------------------------------------------------------------------

    async def _host(self, session_id: str, session: Session) -> None:
        """The session's toolkernel serve, started as the `mcp` SDK's stdio client starts a server, and
        kept until the agent ends (one task enters and leaves the client's context)."""
        stdio = [server for server in session.servers if not getattr(server, "type", None)]
        if not stdio:
            session.client.set_exception(RuntimeError("no stdio MCP server was given on session/new"))
            return
        server = stdio[0]
        params = StdioServerParameters(command=server.command, args=list(server.args),
                                       env={variable.name: variable.value for variable in server.env or []},
                                       cwd=session.cwd)

        async def on_log(*args: Any) -> None:  # (params) in mcp 1.x, (context, params) in 2.x
            if getattr(args[-1], "logger", None) == "toolkernel.bash" and isinstance(args[-1].data, dict):
                await session.runs_ended.put(args[-1].data)

        elicit = (lambda context, question: self._ask_in_chat(session_id, session, question)) if self.forward else None
        try:
            async with over_stdio(params, elicit=elicit, logging_callback=on_log) as client:
                log(f"MCP server {server.name} ready")
                session.client.set_result(client)
                await session.closed.wait()
        except Exception as exc:  # noqa: BLE001 - the turn says it
            log(f"MCP server {server.name} failed: {exc!r}")
            if not session.client.done():
                session.client.set_exception(exc)

    async def _ask_in_chat(self, session_id: str, session: Session, question: Question) -> Any:
        """toolkernel's elicitation as the chat's permission buttons."""
        decisions = question.requested_schema.get("properties", {}).get("decision", {}).get("enum") or ["once", "deny"]
        options = [schema.PermissionOption(option_id=decision, name=OPTIONS[decision][0], kind=OPTIONS[decision][1])
                   for decision in decisions if decision in OPTIONS]
        asked = schema.ToolCallUpdate(tool_call_id=session.tool_call, title=question.message.splitlines()[0][:200],
                                      status="pending")
        answer = await self.conn.request_permission(session_id=session_id, tool_call=asked, options=options)
        if getattr(answer.outcome, "outcome", "") != "selected":
            return types.ElicitResult(action="cancel")
        return types.ElicitResult(action="accept", content={"decision": answer.outcome.option_id})

    async def _call(self, session_id: str, session: Session, tool: str, arguments: dict[str, Any],
                    kind: str) -> Any:
        """One MCP call, shown in the chat as an ACP tool call."""
        client: Client = await session.client
        self._count += 1
        session.tool_call = call_id = f"call-{self._count}"
        await self.conn.session_update(session_id, acp.start_tool_call(
            call_id, f"toolkernel {tool} {arguments.get('notebook_path', '')}".rstrip(), kind=kind,
            status="in_progress", raw_input=arguments))
        result = await client.call_tool(tool, arguments)
        text = "\n".join(block.text or "" for block in result.content if block.type == "text")
        await self.conn.session_update(session_id, acp.update_tool_call(
            call_id, status="failed" if result.is_error else "completed", raw_output=text[:2000]))
        return result, text

    # -- a turn --------------------------------------------------------------------------------

    async def _turn(self, session_id: str, session: Session, prompt: list[Any]) -> str:
        notebook, code = _request(prompt)
        if notebook is None or code is None:
            return "Name a notebook (attach it, or NAME.ipynb) and the code in `backticks`."
        read, text = await self._call(session_id, session, "notebook_read", {"notebook_path": notebook}, "read")
        if read.is_error:
            return f"I could not read {notebook}: {text}"
        ids = CELL_ID.findall(text)
        log(f"notebook {notebook}, last cell {ids[-1] if ids else None}")
        edit = {"notebook_path": notebook, "edit_mode": "insert", "cell_type": "code", "new_source": code,
                "cell_id": ids[-1] if ids else ""}
        if self.forward:
            return await self._edit_and_run(session_id, session, notebook, edit)
        return await self._edit_and_run_in_bash(session_id, session, notebook, edit)

    async def _edit_and_run(self, session_id: str, session: Session, notebook: str, edit: dict[str, Any]) -> str:
        edited, text = await self._call(session_id, session, "notebook_edit", edit, "edit")
        if edited.is_error:
            return f"toolkernel did not insert the cell: {text}"
        cell = (edited.structured_content or json.loads(text))["cell_ids"][0]
        ran, text = await self._call(session_id, session, "notebook_run",
                                     {"notebook_path": notebook, "cell_id": cell}, "execute")
        if ran.is_error:
            return f"I inserted cell {cell} into {_name(notebook)}, but it did not run: {text}"
        return f"I inserted cell {cell} into {_name(notebook)} and ran it. Output: {_first_line(text)}"

    async def _edit_and_run_in_bash(self, session_id: str, session: Session, notebook: str,
                                    edit: dict[str, Any]) -> str:
        script = (f"cell=$(tools notebook-edit {shlex.quote(json.dumps(edit))} | jq -r '.cell_ids[0]')\n"
                  f"tools notebook-run notebook_path={shlex.quote(notebook)} \"cell_id=$cell\"\n")
        started, text = await self._call(session_id, session, "bash",
                                         {"script": script, "run_in_background": True,
                                          "description": f"insert a cell into {notebook} and run it"}, "execute")
        if started.is_error:
            return f"toolkernel did not start the script: {text}"
        await self._say(session_id, "toolkernel may ask you in JupyterLab (a notification, and the Tools "
                                    "sidebar's \"Waiting for you\"); I wait for the script.\n\n")
        bash_id = started.structured_content["id"]
        while (await session.runs_ended.get()).get("id") != bash_id:
            pass
        output, text = await self._call(session_id, session, "bash_output", {"bash_id": bash_id}, "read")
        report = output.structured_content or {}
        stopped = (report.get("tools") or {}).get("stopped")
        if stopped:
            return f"toolkernel stopped the script ({stopped.get('approval') or stopped.get('reason')}): " \
                   f"{_name(notebook)} is unchanged.\n{text}"
        if report.get("exit_code") != 0:
            return f"The script failed:\n{text}"
        return f"I inserted a cell into {_name(notebook)} and ran it. Output: {_first_line(report.get('stdout', text))}"

    async def _say(self, session_id: str, text: str) -> None:
        await self.conn.session_update(session_id, acp.update_agent_message(acp.text_block(text)))


def _name(notebook: str) -> str:
    """How the chat names a notebook: its file name (an attachment's is a file:// URI)."""
    return notebook.rsplit("/", 1)[-1]


def _first_line(output: str) -> str:
    """The run's first line of output. The rest names the server's URL, and JupyterLab takes a chat
    message's link to its own root for a folder path "" (a "Directory not found" dialog)."""
    return output.strip().splitlines()[0] if output.strip() else "(none)"


def _request(prompt: list[Any]) -> tuple[str | None, str | None]:
    """The notebook (an attachment's URI, else the last NAME.ipynb named) and the code of a message."""
    texts = [block.text for block in prompt if getattr(block, "type", "") == "text"]
    links = [block.uri for block in prompt if getattr(block, "type", "") == "resource_link"
             and (block.uri or "").endswith(".ipynb")]
    named = [name for text in texts for name in NOTEBOOK_NAMED.findall(text)]
    code = [span for text in texts for span in CODE.findall(text)]
    return (links or named or [None])[-1], (code or [None])[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--forward", action="store_true",
                        help="put toolkernel's elicitation to the person as ACP session/request_permission")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(acp.run_agent(ScriptedAgent(args.forward)))


if __name__ == "__main__":
    main()
