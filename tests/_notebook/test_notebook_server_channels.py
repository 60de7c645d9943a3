"""The kernel channels of a Jupyter Server pairing, against a small websocket server that behaves
as a gateway does while a new kernel's channels come up: what is sent before then is dropped."""

from __future__ import annotations

import asyncio
import json

import pytest
from websockets.asyncio.server import serve

from toolkernel._errors import Unavailable
from toolkernel._providers._notebook import _server
from toolkernel._providers._notebook._server import ServerApi, ServerConnection

SESSION = {"kernel": {"id": "k-1", "name": "python3"}}


async def _kernel_that_drops(first: int, seen: list[str], upgrade_after: float = 0.0):
    """A channels endpoint that drops the first `first` kernel_info requests, then answers; it
    answers the websocket's upgrade only after `upgrade_after` seconds (a kernel that starts)."""

    async def starting(connection, request):
        await asyncio.sleep(upgrade_after)

    async def channels(ws):
        async for frame in ws:
            msg = json.loads(frame)
            seen.append(msg["header"]["msg_type"])
            if len(seen) <= first:
                continue
            await ws.send(json.dumps({"channel": "shell", "header": {"msg_type": "kernel_info_reply"},
                                      "parent_header": msg["header"], "content": {"status": "ok"},
                                      "metadata": {}}))

    return await serve(channels, "127.0.0.1", 0, process_request=starting)


async def _open(first: int, upgrade_after: float = 0.0) -> list[str]:
    seen: list[str] = []
    server = await _kernel_that_drops(first, seen, upgrade_after)
    port = server.sockets[0].getsockname()[1]
    connection = ServerConnection(ServerApi(f"http://127.0.0.1:{port}/", None), SESSION, created=False)
    try:
        await connection.open()
    finally:
        if connection._ws is not None:
            await connection._ws.close()
        await connection.api.http.aclose()
        server.close()
    return seen


def test_a_kernel_that_drops_the_first_requests_is_asked_again_until_it_answers(monkeypatch):
    monkeypatch.setattr(_server, "READY_ASK_AGAIN_SECONDS", 0.05)
    assert asyncio.run(_open(first=3)) == ["kernel_info_request"] * 4


def test_a_kernel_that_never_answers_fails_with_a_retryable_error(monkeypatch):
    monkeypatch.setattr(_server, "READY_ASK_AGAIN_SECONDS", 0.05)
    monkeypatch.setattr(_server, "READY_TIMEOUT_SECONDS", 0.3)
    with pytest.raises(Unavailable, match="did not answer") as failed:
        asyncio.run(_open(first=10_000))
    assert failed.value.retryable


def test_the_channels_wait_for_a_kernel_that_starts_longer_than_a_request_may_take(monkeypatch):
    # Jupyter Server answers the channels' upgrade only once its kernel started and is alive (up to
    # its kernel_info_timeout): on a loaded machine that took longer than an HTTP request may.
    monkeypatch.setattr(_server, "HTTP_TIMEOUT_SECONDS", 0.2)
    assert asyncio.run(_open(first=0, upgrade_after=1.0)) == ["kernel_info_request"]
