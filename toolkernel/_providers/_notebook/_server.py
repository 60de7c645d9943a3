"""A notebook's kernel on a running Jupyter Server (--server URL --token TOKEN).

The session of the notebook is found (or started) through the REST API; code
runs through the server's kernel websocket (`/api/kernels/<id>/channels`,
Jupyter messages as JSON text frames). This works the same for a local server,
a remote one and a JupyterHub single-user server (give the URL with its
/user/<name>/ prefix).

The token goes only into the Authorization header; no message shows it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import posixpath
import time
import uuid
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import httpx
import websockets
from websockets.asyncio.client import ClientConnection

from ..._errors import CallError, InvalidInput, Unavailable, printable
from ._connection import (AGENT_METADATA, EXECUTE_CONTENT, PAIR_AGAIN, Execution, KernelConnection, Message,
                          OnOutput, ack_at_once)
from ._hub import redirected
from ._roots import published_token
from ._hub import refusal as hub_refusal
from ._stores import ContentsStore, NotebookStore

HTTP_TIMEOUT_SECONDS = 30.0
# How long the kernel list may take: longer than a Jupyter Server waits for its gateway
# (GatewayClient.connect_timeout, 40 s by default), so that a gateway that does not answer comes back
# as the server's reason, not as our own timeout.
KERNEL_LIST_TIMEOUT_SECONDS = 60.0
READY_TIMEOUT_SECONDS = 60.0
# How long the kernel channels' websocket may take to open: the server answers the upgrade once its
# kernel has started and is alive (Jupyter Server's channels handler awaits both, the second for up
# to its kernel_info_timeout, 60 s). A kernel it has just started takes that long on a loaded machine,
# where a 30 s limit failed a pairing whose kernel came up a moment later (a fresh-clone CI run).
CHANNELS_OPEN_SECONDS = 60.0
READY_ASK_AGAIN_SECONDS = 3.0
# How long a request that the kernel replaced under it never acknowledged waits to learn whether
# the new kernel took it (a kernel starts in seconds; a loaded machine makes that tens).
RESTART_SETTLE_SECONDS = 60.0
# After this long without word on our channels, the new kernel is asked on a websocket of its own
# (for at most as long, then again later); when it answers there and ours stay silent this much
# longer, ours lead to the old kernel's ports.
SIDE_CHECK_SECONDS = 5.0
STALE_GRACE_SECONDS = 3.0
# How often a run whose kernel stays silent asks the server whether the kernel is still there: a server
# whose kernels run on a gateway keeps our websocket open, silent, while the gateway is down or lost it.
SERVER_CHECK_SECONDS = 5.0
PROTOCOL_VERSION = "5.3"
# Statuses the server itself sends when the kernel process was replaced or lost.
KERNEL_LOST_STATES = {"restarting", "dead", "autorestarting"}


class ServerApi:
    """The REST side; every failure is translated here, without the token."""

    def __init__(self, url: str, token: str | None, pair_again: str = PAIR_AGAIN) -> None:
        self.base, url_token = split_token(url)
        self.pair_again = pair_again  # how the front end that paired says to pair again
        # A server running here published its own token (readable by this user only): no token need pass
        # through an agent's config or environment.
        self.token = token or url_token or published_token(self.base) or os.environ.get("JUPYTER_TOKEN") or None
        self.http = httpx.AsyncClient(headers=self.auth_headers(), timeout=HTTP_TIMEOUT_SECONDS)

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"} if self.token else {}

    def url(self, *parts: str) -> str:
        return self.base.rstrip("/") + "/" + "/".join(p.strip("/") for p in parts)

    def ws_url(self, *parts: str, query: str) -> str:
        scheme, netloc, path, _, _ = urlsplit(self.url(*parts))
        ws_scheme = {"http": "ws", "https": "wss"}[scheme]
        return urlunsplit((ws_scheme, netloc, path, query, ""))

    async def answer(self, method: str, *parts: str, body: Any = None, params: dict[str, str] | None = None,
                     timeout: float = HTTP_TIMEOUT_SECONDS) -> httpx.Response:
        """The server's answer, whatever its status; Unavailable when none came."""
        try:
            return await self.http.request(method, self.url(*parts), json=body, params=params, timeout=timeout)
        except httpx.HTTPError as exc:
            raise Unavailable(f"the Jupyter Server at {self.base} did not answer ({method} {self.url(*parts)}): "
                              f"{type(exc).__name__}", retryable=True) from exc

    async def request(self, method: str, *parts: str, body: Any = None, params: dict[str, str] | None = None,
                      missing_ok: bool = False) -> Any:
        response = await self.answer(method, *parts, body=body, params=params)
        if response.status_code == 404 and missing_ok:
            return None
        where = f"{method} {self.url(*parts)}"
        if response.is_redirect:
            raise redirected(self.base, where, response)
        if response.status_code in (401, 403):
            raise InvalidInput(await self._refused(where, response))
        if response.status_code >= 400:
            raise self.failure(where, response)
        return _json(response, self.base)

    def failure(self, where: str, response: httpx.Response) -> CallError:
        """What the server said when it refused `where`: its own reason first (a gateway's "Kernel does not
        exist", "ConnectionError was received from Gateway server"), then the status."""
        if response.status_code in (401, 403):
            return InvalidInput(_refusal(self.base, where, response, self.pair_again))
        reason = _server_message(response)
        said = f": {reason} (HTTP {response.status_code} to {where})" if reason else \
            f" HTTP {response.status_code} to {where}"
        return Unavailable(f"the Jupyter Server at {self.base} answered{said}",
                           retryable=response.status_code >= 500)

    async def kernel_model(self, kernel_id: str) -> dict[str, Any] | None:
        """The server's model of kernel `kernel_id`; None when it has no such kernel. The list is asked
        first: a server whose kernels run on a gateway asks the gateway for it (a gateway that is down
        says so at once, and kernels a restarted gateway lost leave it), while for one kernel it answers
        from what it last heard. A gateway may refuse listing (403): then the kernel is asked for."""
        listed = await self.answer("GET", "api/kernels", timeout=KERNEL_LIST_TIMEOUT_SECONDS)
        if listed.status_code >= 500:
            raise self.failure(f"GET {self.url('api/kernels')}", listed)
        if listed.status_code == 200:
            kernels = _json(listed, self.base)
            if isinstance(kernels, list):
                return next((k for k in kernels if isinstance(k, dict) and k.get("id") == kernel_id), None)
        return await self.request("GET", "api/kernels", kernel_id, missing_ok=True)

    async def _refused(self, where: str, response: httpx.Response) -> str:
        plain = _refusal(self.base, where, response, self.pair_again)
        if _server_message(response) in ("", "Forbidden"):  # a refused token: JupyterHub can say which scope
            return await hub_refusal(self.http, self.base, response) or plain
        return plain

    async def close(self) -> None:
        await self.http.aclose()


def _json(response: httpx.Response, base: str) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError as exc:  # a proxy's page, not the server's API
        raise Unavailable(f"the Jupyter Server at {base} answered {response.request.method} "
                          f"{response.request.url} with something other than JSON", retryable=True) from exc


def _refusal(base: str, where: str, response: httpx.Response, pair_again: str) -> str:
    """Jupyter Server answers a wrong token with 403 too; a 403 that says why is about something else
    (a gateway or an authorizer refusing the request), and saying "token" there misleads."""
    reason = _server_message(response)
    if response.status_code == 401 or reason in ("", "Forbidden"):
        # Each front end names the option its own way: `serve`'s own --token is its bearer token.
        return (f"the Jupyter Server at {base} refused the token (HTTP {response.status_code}). Give the server's "
                f"token: {pair_again}")
    return f"the Jupyter Server at {base} refused {where} (HTTP 403): {reason}"


def _server_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return ""
    if not isinstance(body, dict):
        return ""
    message = body.get("message") or body.get("reason")  # tornado's HTTPError gives both; either may be null
    return str(message)[:300] if message else ""


def split_token(url: str) -> tuple[str, str | None]:
    """A URL copied from `jupyter server list` carries ?token=...; keep it out of the base URL."""
    scheme, netloc, path, query, _ = urlsplit(url)
    if scheme not in ("http", "https") or not netloc:
        raise InvalidInput(f"--server needs an http:// or https:// URL, not {scheme or 'a bare'} address")
    params = dict(parse_qsl(query))
    token = params.pop("token", None)
    return urlunsplit((scheme, netloc, path or "/", urlencode(params), "")), token


@dataclass
class _Request:
    """An execute_request on its way, and what became of it when the kernel was replaced under it."""

    msg_id: str
    kernel: int  # the kernel it was sent to, as `ServerConnection` counts them
    answered_by: int | None = None  # the kernel that first said anything about it
    probe: str = ""  # a kernel_info_request sent behind it to the kernel that replaced that one
    probe_kernel: int = -1
    probe_answered: bool = False
    replaced_at: float = 0.0
    side_checked_at: float = 0.0
    side_answered_at: float = 0.0


class ServerConnection(KernelConnection):
    """The kernel's channels over the server's websocket.

    Jupyter Server restarts a kernel that died behind the same websocket, which it never closes
    for that. So kernels are counted: one more each time the server says the process under our
    channels was lost (`restarting`, `dead`). A run never goes out on channels opened before the
    kernel was last replaced: the server reconnects an open websocket to the new process only
    when the ports stay the same, and even then a request sent while no process listens waits in
    its queue for whichever kernel comes next. A fresh websocket, with a fresh client session, is
    attached by the server to the kernel as it is now and answers only what we send on it.
    (A kernel's own `starting` status says nothing here: ipykernel may send it after it began
    answering requests, on channels opened after its start.)
    """

    def __init__(self, api: ServerApi, session: dict[str, Any], *, created: bool) -> None:
        super().__init__()
        self.api = api
        self.session = session
        self.kernel_id: str = session["kernel"]["id"]
        self.label = session["kernel"].get("name") or "kernel"
        self.created = created  # this session started the server session, so it ends it
        self._client_session = uuid.uuid4().hex
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._iopub: asyncio.Queue[Message] = asyncio.Queue()
        self._replies: asyncio.Queue[Message] = asyncio.Queue()
        self._kernel = 0  # the kernels seen under our channels, counted from 0
        self._ready_kernel = -1  # the kernel our channels were opened on (and heard back from)
        self._lost_state = ""  # the status that counted the last kernel out
        self._request: _Request | None = None
        self._notice = ""  # what the next run's result says became of the kernel before it
        self._checked_at = 0.0  # when the server last said the kernel is there
        self._gone = False  # the server no longer has the kernel (it, or its gateway, was restarted)
        self._server_restarted = False  # the server closed our websocket when the kernel was last found gone
        self._reattached = False  # the server took the gone kernel up again by its id: the next run tells how
        self._last_count: int | None = None  # the execution count of our last run in this kernel

    async def open(self, *, fresh: bool = False) -> None:
        if fresh:
            # Nothing sent in the old client session is ours any more: the server keeps the old
            # channels (and replays what they got) for a reconnection under the same session.
            self._client_session = uuid.uuid4().hex
            self._iopub, self._replies = asyncio.Queue(), asyncio.Queue()
        kernel = self._kernel
        url = self.api.ws_url("api/kernels", self.kernel_id, "channels",
                              query=urlencode({"session_id": self._client_session}))
        try:
            self._ws = await websockets.connect(url, additional_headers=self.api.auth_headers(), max_size=None,
                                                open_timeout=CHANNELS_OPEN_SECONDS)
        except (OSError, websockets.WebSocketException, asyncio.TimeoutError) as exc:
            raise Unavailable(f"could not open the kernel channels of {self.label} on {self.api.base}: "
                              f"{type(exc).__name__}", retryable=True) from exc
        self._reader = asyncio.create_task(self._read_forever())
        await self._wait_ready()
        self._ready_kernel = kernel

    async def _wait_ready(self) -> None:
        # Asked again every few seconds, as jupyter_client does: a request sent before a new
        # kernel's channels are up (through a gateway, most of all) is dropped, not queued.
        deadline, asked = time.monotonic() + READY_TIMEOUT_SECONDS, set()
        while (remaining := deadline - time.monotonic()) > 0:
            asked.add(await self._send("shell", "kernel_info_request", {}))
            if await self._reply(asked, min(READY_ASK_AGAIN_SECONDS, remaining)) is not None:
                return
        raise Unavailable(f"the {self.label} kernel on {self.api.base} did not answer", retryable=True)

    async def _read_forever(self) -> None:
        assert self._ws is not None
        sock = self._ws.transport.get_extra_info("socket")
        with contextlib.suppress(websockets.ConnectionClosed):
            async for frame in self._ws:
                ack_at_once(sock)
                if isinstance(frame, str):  # binary frames carry buffers (widgets): not ours to show
                    self._route(json.loads(frame))

    def _route(self, msg: Message) -> None:
        channel = msg.pop("channel", None)
        parent = msg.get("parent_header") or {}
        if channel == "iopub" and self._counts_a_lost_kernel(msg):
            return
        # Every client of the kernel gets every IOPub message; keep only answers to ours.
        if parent.get("session") != self._client_session:
            return
        self._note_answer(channel, parent.get("msg_id"))
        if channel == "iopub":
            self._iopub.put_nowait(msg)
        elif channel == "shell":
            self._replies.put_nowait(msg)

    def _counts_a_lost_kernel(self, msg: Message) -> bool:
        state = (msg.get("content") or {}).get("execution_state")
        if msg["header"].get("msg_type") != "status" or state not in KERNEL_LOST_STATES:
            return False
        self._kernel += 1
        self._lost_state = state
        return True

    def _note_answer(self, channel: str | None, msg_id: str | None) -> None:
        request = self._request
        if request is None:
            return
        if msg_id == request.msg_id and request.answered_by is None:
            request.answered_by = self._kernel
        elif msg_id == request.probe and channel == "shell":
            request.probe_answered = True

    async def _send(self, channel: str, msg_type: str, content: dict[str, Any],
                    metadata: dict[str, Any] | None = None, msg_id: str = "") -> str:
        msg_id = msg_id or uuid.uuid4().hex
        header = {"msg_id": msg_id, "msg_type": msg_type, "username": "toolkernel",
                  "session": self._client_session, "version": PROTOCOL_VERSION,
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat()}
        msg = {"header": header, "parent_header": {}, "metadata": metadata or {}, "content": content,
               "channel": channel, "buffers": []}
        if self._ws is None:
            raise Unavailable(f"the channels of the {self.label} kernel are closed", retryable=True)
        try:
            await self._ws.send(json.dumps(msg))
        except websockets.ConnectionClosed as exc:
            raise Unavailable(f"the connection to the {self.label} kernel on {self.api.base} closed",
                              retryable=True) from exc
        return msg_id

    async def _send_execute(self, code: str) -> str:
        if self._ready_kernel != self._kernel:  # replaced again since `_require_alive` reopened
            raise Unavailable(f"the {self.label} kernel on {self.api.base} was restarted again while its channels "
                              "were opened: the code did not run", retryable=True)
        # Known before it leaves: an answer may come back before `send` returns.
        self._request = _Request(uuid.uuid4().hex, self._kernel)
        return await self._send("shell", "execute_request", {"code": code, **EXECUTE_CONTENT}, AGENT_METADATA,
                                msg_id=self._request.msg_id)

    async def _next_iopub(self, timeout: float) -> Message | None:
        try:
            return await asyncio.wait_for(self._iopub.get(), timeout)
        except asyncio.TimeoutError:
            return None

    async def _reply(self, msg_id: str | set[str], timeout: float) -> Message | None:
        wanted = {msg_id} if isinstance(msg_id, str) else msg_id
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                reply = await asyncio.wait_for(self._replies.get(), remaining)
            except asyncio.TimeoutError:
                return None
            if reply.get("parent_header", {}).get("msg_id") in wanted:
                return reply
        return None

    async def _interrupt(self) -> None:
        await self.api.request("POST", "api/kernels", self.kernel_id, "interrupt")

    async def execute(self, code: str, timeout: float, on_output: OnOutput | None = None) -> Execution:
        try:
            execution = await super().execute(code, timeout, on_output)
            request = self._request
            execution.restarted = request is not None and request.answered_by not in (None, request.kernel)
            execution.notice, self._notice = self._notice, ""
            self._tell_reattached(execution)
            if execution.execution_count is not None:
                self._last_count = execution.execution_count
            return execution
        finally:
            self._request = None

    async def _alive(self) -> bool:
        request = self._request
        if request is not None and request.kernel != self._kernel:
            return await self._outlived(request)
        channels_open = self._reader is not None and not self._reader.done()
        if channels_open and self._ready_kernel == self._kernel and not self._check_due():
            return True
        model = await self._server_model()
        self._gone, self._server_restarted = model is None, not channels_open
        if model is None or model.get("execution_state") == "dead":
            return False
        self._checked_at = time.monotonic()
        if self._ready_kernel != self._kernel:
            await self._reopen_after_restart()
        elif not channels_open:
            await self._reopen()
        return True

    def _check_due(self) -> bool:
        """Asked before every run, and every SERVER_CHECK_SECONDS while a run's kernel is silent."""
        return self._request is None or time.monotonic() - self._checked_at > SERVER_CHECK_SECONDS

    async def _server_model(self) -> dict[str, Any] | None:
        try:
            return await self.api.kernel_model(self.kernel_id)
        except Unavailable as exc:
            if self._request is None:
                raise  # nothing was sent: the call fails as the server said
            raise Unavailable(f"lost touch with the {self.label} kernel while the code ran, so whether it finished "
                              f"is unknown: {exc.message}", retryable=True) from exc

    async def _require_alive(self) -> None:
        if await self._alive():
            return
        if not self._gone:
            raise Unavailable(self.dead_message(), retryable=True)
        self._notice = await self._replace_gone_kernel()

    async def _replace_gone_kernel(self) -> str:
        """The kernel is gone from the server (the server or its gateway was restarted, or someone shut it
        down): the notebook's session there now, or a new one, gives the kernel that runs from here on.
        A new session asks for the old kernel by its id first: a restarted server whose kernels run on a
        gateway takes up the gateway's kernel again, variables and all (a server with kernels of its own
        starts a new one under that id: the next run's execution count tells which, `_tell_reattached`)."""
        old, path = self.kernel_id, server_path(self.session.get("path") or "")
        session = await live_session(self.api, path, gone=old)
        created = session is None
        if session is None:
            # Only a server that restarted (our websocket closed with it) may take up a kernel it does not
            # know: one its gateway kept.
            session = await self.new_session(path, old if self._server_restarted else "")
        await self._close_channels()
        self.session, self.kernel_id, self.created = session, session["kernel"]["id"], created
        self._kernel, self._ready_kernel, self._lost_state, self._gone = 0, -1, "", False
        await self.open(fresh=True)
        self._checked_at = time.monotonic()
        if self.kernel_id == old:
            self._reattached = True
            return ""
        self._last_count = None  # a new kernel: nothing of ours ran in it yet
        how = "a new kernel was started" if created else f"the notebook's session there has kernel {self.kernel_id}"
        return self._gone_notice(old, f"{how}, without the old one's variables")

    async def new_session(self, path: str, kernel_id: str) -> dict[str, Any]:
        """A session started in place of a gone kernel's (see `start_session`)."""
        return await start_session(self.api, path, self.label, kernel_id)

    def _gone_notice(self, old: str, how: str) -> str:
        # Ids and names as the server gave them: shown where a terminal may read them.
        return printable(f"(the {self.label} kernel {old} was gone from the Jupyter Server at {self.api.base}: the "
                         f"server or its gateway was restarted, or the kernel was shut down; {how}.)")

    def _tell_reattached(self, execution: Execution) -> None:
        """After the first run in a kernel taken up again by its id: a kernel that ran our code before
        counts on from there, one the server started anew counts from 1 (unless someone ran code in it
        first: then it reads as kept)."""
        if not self._reattached or execution.execution_count is None:
            return
        self._reattached = False
        if self._last_count is not None and execution.execution_count > 1:
            how = "the server reached it again (on its gateway), with its variables"
        elif self._last_count is not None:
            how = "the server started a new kernel under its id, without the old one's variables"
        else:
            how = "the server has a kernel under its id again (if it was started anew, its variables are gone)"
        execution.notice = self._gone_notice(self.kernel_id, how)

    async def _outlived(self, request: _Request) -> bool:
        """The kernel `request` was sent to was replaced. True while the request may still come back
        from the kernel there is now; False when one that took it went with it; raises when it never
        reached the kernel there is now."""
        if request.answered_by is not None:
            return request.answered_by == self._kernel  # the new kernel took it from the server's queue
        if self._lost_state == "dead":
            raise Unavailable(f"the paired kernel ({self.label}) died with the code sent to it, and the server gave "
                              f"up restarting it: the code may not have run. {self.restart_hint()}", retryable=True)
        if request.probe_kernel != self._kernel:
            # Shell messages are answered in the order they were sent: a reply to this one, with
            # nothing about the request before it, says the request never reached the new kernel.
            await self._probe_new_kernel(request)
            return True
        if request.probe_answered:
            raise self._never_reached("the new kernel did not get the code")
        return await self._no_word_yet(request)

    async def _no_word_yet(self, request: _Request) -> bool:
        """Neither the request nor the probe behind it answered yet: the new kernel may be starting,
        or our channels may lead where it is not."""
        last_asked = max(request.replaced_at, request.side_checked_at)
        if not request.side_answered_at and time.monotonic() - last_asked > SIDE_CHECK_SECONDS:
            if await self._answers_on_new_channels():
                request.side_answered_at = time.monotonic()
            request.side_checked_at = time.monotonic()
            return True  # what came meanwhile on our channels is looked at first
        if request.side_answered_at and time.monotonic() - request.side_answered_at > STALE_GRACE_SECONDS:
            # Restarted on new ports: the server left our websocket on the old ones.
            raise self._never_reached("the new kernel answers on new channels but not on ours, which the "
                                      "server left on the old kernel's ports")
        if time.monotonic() - request.replaced_at > RESTART_SETTLE_SECONDS:
            raise self._lost_on_the_way(f"the new kernel did not answer within {RESTART_SETTLE_SECONDS:g} s")
        return True

    async def _probe_new_kernel(self, request: _Request) -> None:
        request.probe, request.probe_kernel, request.probe_answered = uuid.uuid4().hex, self._kernel, False
        request.replaced_at = time.monotonic()
        request.side_checked_at = request.side_answered_at = 0.0
        try:
            await self._send("shell", "kernel_info_request", {}, msg_id=request.probe)
        except Unavailable:
            raise self._lost_on_the_way("its channels closed") from None

    async def _answers_on_new_channels(self) -> bool:
        """Whether the kernel there is now answers on a websocket of its own (ours stays open) soon.
        Not soon says nothing: it may be starting still, or busy with our request."""
        side = ServerConnection(self.api, self.session, created=False)
        try:
            await asyncio.wait_for(side.open(), SIDE_CHECK_SECONDS)
            return True
        except (Unavailable, asyncio.TimeoutError):
            return False
        finally:
            await side._close_channels()

    def _never_reached(self, why: str) -> Unavailable:
        # Nothing came back about the code: the old kernel may have died before it read it, or
        # while it began it (a kernel killed at once says nothing).
        return Unavailable(
            f"the paired kernel ({self.label}) died with the code sent to it, and the server restarted it; {why}, "
            "so the code did not run there (the old kernel may have begun it: nothing came back). The new kernel "
            "starts without the old one's variables: run what the code needs again.", retryable=True)

    def _lost_on_the_way(self, why: str) -> Unavailable:
        return Unavailable(
            f"the paired kernel ({self.label}) died with the code sent to it, and the server restarted it; {why}, "
            "so the code may not have run. The new kernel starts without the old one's variables: run what the "
            "code needs again once the kernel answers.", retryable=True)

    def _check_not_replaced(self, execution: Execution) -> None:
        request = self._request
        if request is None or request.kernel == self._kernel or request.answered_by == self._kernel:
            return
        if request.answered_by is not None:
            raise self._died_while_running(execution)
        raise self._lost_on_the_way("no kernel answered for it within the run's timeout")

    def _died_while_running(self, execution: Execution) -> Unavailable:
        request = self._request
        if self._gone:
            return Unavailable(
                f"the {self.label} kernel is gone from the Jupyter Server at {self.api.base} while the code ran "
                f"({len(execution.outputs)} output(s) before that): the server or its gateway was restarted, or the "
                "kernel was shut down. The next run starts a new kernel, without the old one's variables.",
                retryable=True)
        if request is None or request.kernel == self._kernel or self._lost_state == "dead":
            return super()._died_while_running(execution)
        return Unavailable(
            f"the paired kernel ({self.label}) died while the code ran ({len(execution.outputs)} output(s) "
            "before that), and a new kernel took its place, without the old one's variables: run what the "
            "code needs again.", retryable=True)

    async def _reopen_after_restart(self) -> None:
        try:
            await self._reopen(fresh=True)
        except Unavailable as exc:
            raise Unavailable(f"the {self.label} kernel on {self.api.base} was restarted and does not answer on "
                              f"new channels yet ({exc.message}): the code did not run", retryable=True) from exc

    async def _reopen(self, *, fresh: bool = False) -> None:
        await self._close_channels()
        await self.open(fresh=fresh)

    def restart_hint(self) -> str:
        return "Restart it (notebook_run with restart=true, or from JupyterLab)."

    async def restart(self) -> str:
        async with self._lock:
            # Asked first: a server whose kernels run on a gateway answers a restart of a kernel the
            # gateway lost with HTTP 500 and no reason.
            notice = ""
            if await self._server_model() is None:
                self._server_restarted = self._reader is None or self._reader.done()
                old = self.kernel_id
                notice = await self._replace_gone_kernel()
                if not self._reattached:
                    return notice
                # Taken up again (maybe with its variables): restarted as asked.
                self._reattached = False
                notice = self._gone_notice(old, "the server reached a kernel under its id again")
            model = await self.api.request("POST", "api/kernels", self.kernel_id, "restart", missing_ok=True)
            if model is None:
                return await self._replace_gone_kernel()
            await self._reopen(fresh=True)
            self._last_count = None
            return notice

    async def _close_channels(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._ws = self._reader = None

    async def close(self) -> None:
        try:
            await self._close_channels()
            if self.created:
                await self.api.request("DELETE", "api/sessions", self.session["id"], missing_ok=True)
        finally:
            await self.api.close()

    def describe(self) -> str:
        return f"{self.label} kernel of session {self.session.get('path')} on {self.api.base}"

    def channels_to(self, kernel_id: str) -> int:
        """How many of the server's connections to kernel `kernel_id` are this pairing's."""
        return int(self._ws is not None and kernel_id == self.kernel_id)


async def connect_server(api: ServerApi, path: str, kernel_name: str | None) -> ServerConnection:
    """The kernel of `path`'s session on the server (a session is started when there is none)."""
    session, created = await _find_or_start_session(api, path, kernel_name)
    connection = ServerConnection(api, session, created=created)
    await connection.open()
    return connection


async def open_notebook(api: ServerApi, path: str) -> NotebookStore | None:
    """How this server's copy of `path` is read and changed; None while the notebook does not exist."""
    if await api.request("GET", "api/contents", quote(path), params={"content": "0"}, missing_ok=True) is None:
        return None
    # Here, not at the top: the shared document's libraries (jupyter_ydoc loads every installed
    # document type: Jupyter AI's chat brings the MCP server SDK) cost `serve` 0.2-0.4 s to start.
    from ._shared import open_shared

    return await open_shared(api, path) or ContentsStore(api, path)


def server_path(notebook: str) -> str:
    """`notebook` relative to the server's root, whatever folder the kernel runs in. The root is the
    boundary: `a/../b.ipynb` is `b.ipynb`, a `..` that leaves the root is refused."""
    relative = posixpath.normpath(notebook.replace(os.sep, "/").lstrip("/"))
    if relative == ".." or relative.startswith("../"):
        raise InvalidInput(f"{notebook!r} leads out of the server's root; give the notebook's path from the "
                           f"server's root")
    return relative


async def _find_or_start_session(api: ServerApi, path: str, kernel_name: str | None) -> tuple[dict[str, Any], bool]:
    session = await live_session(api, path)
    if session is not None:
        return session, False
    return await start_session(api, path, kernel_name), True


async def live_session(api: ServerApi, path: str, gone: str = "") -> dict[str, Any] | None:
    """`path`'s session on the server; never one whose kernel is `gone` (the server may still name it
    until it learns that the kernel's gateway lost it: that session is ended)."""
    for session in await api.request("GET", "api/sessions") or []:
        if not isinstance(session, dict) or not isinstance(session.get("kernel"), dict):
            continue  # none to run in (a session whose kernel a gateway lost has none)
        if server_path(str(session.get("path") or "")) == path and isinstance(session["kernel"].get("id"), str):
            if session["kernel"]["id"] != gone:
                return session
            with contextlib.suppress(Unavailable):  # it may fail to shut down the kernel it lost: ended anyway
                await api.request("DELETE", "api/sessions", session["id"], missing_ok=True)
    return None


async def start_session(api: ServerApi, path: str, kernel_name: str | None, kernel_id: str = "") -> dict[str, Any]:
    """A new session for `path`, on kernel `kernel_id` when the server can take it up (else on a new kernel)."""
    body = {"path": path, "name": PurePosixPath(path).name, "type": "notebook"}
    kernel = {"name": kernel_name} if kernel_name else {}
    if kernel_id:
        with contextlib.suppress(Unavailable):
            session = await api.request("POST", "api/sessions", body={**body, "kernel": {"id": kernel_id}})
            if isinstance(session, dict) and (session.get("kernel") or {}).get("id") == kernel_id:
                return session
            if isinstance(session, dict) and session.get("id"):
                # A gateway that lost the kernel leaves the session without one, and it cannot be ended
                # (HTTP 500); given a new kernel it is whole again (the server's 500 is about ending the
                # old one).
                with contextlib.suppress(Unavailable):
                    await api.request("PATCH", "api/sessions", session["id"], body={"kernel": kernel})
    session = await api.request("POST", "api/sessions", body={**body, "kernel": kernel})
    if not isinstance(session, dict) or not isinstance(session.get("kernel"), dict) \
            or not isinstance(session["kernel"].get("id"), str):
        raise Unavailable(f"the Jupyter Server at {api.base} gave no kernel for {path}", retryable=True)
    return session
