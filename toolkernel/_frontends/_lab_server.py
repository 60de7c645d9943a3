"""JupyterLab's server side: the calls waiting for a person in the pending store, listed and
answered under the Jupyter Server's own authentication and authorization.

    GET  {base_url}toolkernel/pending       {"requests": [...], "skipped": [...]}
    POST {base_url}toolkernel/pending/ID    {"project": "...", "decision": "once"|"always"|"deny"}

A `toolkernel serve` whose client cannot answer (no MCP elicitation, as with Jupyter AI), or an
agent's cell, leaves its question in the pending store; `toolkernel approve` answers it from a
terminal. This lists the requests of every project at or below the server's root (`project` is
its folder relative to the root) and answers one, with the same functions `toolkernel approve`
uses (`_answers.waiting_overview`, `_answers.answer_request`), so the same rules hold: what the
store holds is untrusted; a "once" counts only in the process that published the request, for
the very call it asked about; "always" saves the rule for the tool shown and is refused where an
ask rule would keep asking. The page polls the list (`labextension/src/pending.ts`).

Enabled by `jupyter-config/jupyter_server_config.d/toolkernel.json`, which the wheel installs
(`toolkernel._jupyter_server_extension_points` names this module).
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from .._approval._pending import DECISIONS, PendingError, projects_under
from .._errors import ConfigError, ToolkernelError, printable
from ._answers import answer_request, waiting_overview

AUTH_RESOURCE = "toolkernel"  # for an Authorizer that tells resources apart: answering is a write


def listing(root: str) -> dict[str, Any]:
    """The requests waiting in every project at or below `root`, oldest first, each with its
    project relative to `root`; and one line per file or project that could not be read."""
    requests: list[dict[str, Any]] = []
    skipped: list[str] = []
    for project in projects_under(root):
        where = _relative(project, root)
        try:
            found, ignored = waiting_overview(project)
        except ConfigError as exc:  # "always" cannot be judged: the project's config says why
            skipped.append(f"{printable(where)}: {exc}")
            continue
        requests += [{**request, "project": where} for request in found]
        skipped += [f"{printable(where)}: {line}" for line in ignored]
    return {"requests": sorted(requests, key=lambda r: r["created"]), "skipped": skipped}


def answer(root: str, project: Any, request_id: Any, decision: Any) -> str:
    """Answer `request_id` of `project` (relative to `root`) as `toolkernel approve` does there."""
    if not isinstance(project, str) or not isinstance(decision, str) or decision not in DECISIONS:
        raise PendingError('send {"project": "<folder>", "decision": "once" | "always" | "deny"}')
    folder = os.path.realpath(os.path.join(root, project))
    if folder not in projects_under(root):  # at or below the root, and with requests waiting
        raise PendingError(f"no request waits in {printable(project)} under the server's root")
    return answer_request(folder, str(request_id), decision)


class PendingHandler(APIHandler):
    auth_resource = AUTH_RESOURCE

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.finish(json.dumps(await asyncio.to_thread(listing, server_root(self.settings))))


class AnswerHandler(APIHandler):
    auth_resource = AUTH_RESOURCE

    @web.authenticated
    @authorized
    async def post(self, request_id: str) -> None:
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            raise web.HTTPError(400, "the body is not JSON") from None
        if not isinstance(body, dict):
            raise web.HTTPError(400, "the body is not a JSON object")
        try:
            said = await asyncio.to_thread(answer, server_root(self.settings), body.get("project"),
                                           request_id, body.get("decision"))
        except (PendingError, ToolkernelError) as exc:
            raise web.HTTPError(409, str(exc)) from None
        self.finish(json.dumps({"message": said}))


def server_root(settings: Any) -> str:
    """The server's root folder. Jupyter Server's `server_root_dir` setting spells a root under the home
    folder `~/...` (for its pages), which a path function would take as a folder named `~`."""
    return os.path.expanduser(settings["server_root_dir"])


def _load_jupyter_server_extension(serverapp: Any) -> None:
    app = serverapp.web_app
    pending = url_path_join(app.settings["base_url"], "toolkernel", "pending")
    app.add_handlers(".*$", [(pending, PendingHandler), (url_path_join(pending, "([^/]+)"), AnswerHandler)])


def _relative(project: str, root: str) -> str:
    return os.path.relpath(project, os.path.realpath(root)).replace(os.sep, "/")
