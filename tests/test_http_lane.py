"""Tool calls over streamable HTTP and the older SSE transport, past the SDK's session
(toolkernel/_providers/_mcp/_http.py, _sse.py): the SSE parser against the standard's rules,
long replies kept in files, progress, timeouts, the call's other messages reaching the session,
and servers that answer as no server should."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import subprocess
import sys
import time

import pytest

from test_mcp import ENV, SERVERS, by_name, call, ctx, free_port, run, start_http_server, wait_until
from toolkernel._config._servers import ServerConfig
from toolkernel._errors import Unavailable
from toolkernel._longtext import LongJSON, LongText
from toolkernel._mcp_sdk import MAJOR
from toolkernel._providers._mcp import _http as _http_lane
from toolkernel._providers._mcp._http import Events, message_of
from toolkernel._providers._mcp import ServerPool

pytestmark = pytest.mark.timeout(300)


# --- the SSE parser ----------------------------------------------------------------------

def reference_events(stream: bytes) -> list[tuple[str, bytes]]:
    """The HTML standard's event-stream interpretation, on the whole stream at once."""
    events, data, kind = [], None, b""
    for line in re.split(rb"\r\n|\r|\n", stream)[:-1]:  # the last part has no line ending: not a line
        if not line:
            if data is not None:
                events.append(((kind or b"message").decode(), data))
            data, kind = None, b""
            continue
        field, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if field == b"data":
            data = value if data is None else data + b"\n" + value
        elif field == b"event":
            kind = value
    return events


def random_stream(rng: random.Random) -> bytes:
    endings = [b"\n", b"\r\n", b"\r"]
    out = []
    for _ in range(rng.randint(0, 6)):
        for _ in range(rng.randint(0, 2)):
            out.append(rng.choice([b": comment", b"id: 7", b"retry: 10", b"event: " + rng.choice([b"message", b"x"]),
                                   b"unknown: field", b"event"]) + rng.choice(endings))
        for _ in range(rng.randint(0, 3)):
            value = rng.choice([b"", b" ", b"{}", b'{"a": "b:c"}', b"  two spaces", b"x" * rng.randint(1, 300)])
            line = b"data" if rng.random() < 0.1 else rng.choice([b"data:", b"data: "]) + value  # "data": empty
            out.append(line + rng.choice(endings))
        out.append(rng.choice(endings))
    return b"".join(out)


@pytest.mark.parametrize("seed", range(300))
def test_events_are_the_standard_s_whatever_the_pieces_they_arrive_in(seed):
    rng = random.Random(seed)
    stream = random_stream(rng)
    cuts = sorted(rng.sample(range(len(stream) + 1), min(len(stream) + 1, rng.randint(0, 12))))
    parser, got = Events("nonce"), []
    for start, end in zip([0, *cuts], [*cuts, len(stream)]):
        got += [(kind, data.joined()) for kind, data in parser.feed(stream[start:end])]
    assert got == reference_events(stream)


def test_a_long_event_s_long_strings_stay_in_a_file():
    text = "é中 line\n" * 300_000
    message = json.dumps({"jsonrpc": "2.0", "id": "toolkernel-1", "result": {
        "content": [{"type": "text", "text": text}], "structuredContent": {"result": text}}}).encode()
    parser, events = Events("nonce"), []
    stream = b"data: " + message + b"\r\n\r\n"
    for start in range(0, len(stream), 65536):
        events += parser.feed(stream[start:start + 65536])
    ((kind, data),) = events
    assert data.long is not None and data.size == len(message)
    result = message_of(data)["result"]
    (block,) = result["content"]
    assert type(block["text"]) is LongText and str(block["text"]) == text
    assert result["structuredContent"]["result"] is block["text"]  # kept once


# --- a real server over streamable HTTP ------------------------------------------------------

SERVES = {"sse": ["--http"], "json": ["--json", "--http"], "older-sse": ["--sse"]}  # the port comes last


def served(params: str, port: int, name: str) -> ServerConfig:
    if params == "older-sse":
        return ServerConfig(name, "sse", url=f"http://127.0.0.1:{port}/sse")
    return ServerConfig(name, "http", url=f"http://127.0.0.1:{port}/mcp")


@pytest.fixture(scope="module", params=list(SERVES))
def big_http(request):
    """big.py over streamable HTTP, answering each call with an SSE stream or a JSON body, or
    over the older SSE transport (`_sse.py`)."""
    port = free_port()
    process = subprocess.Popen([sys.executable, str(SERVERS / "big.py"), *SERVES[request.param], str(port)],
                               env={**os.environ, **ENV}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: _listening(port, process), "the HTTP server to listen")
    pool = ServerPool()
    yield pool, served(request.param, port, "big")
    run(pool.close())
    process.kill()
    process.wait()


def _listening(port: int, process: subprocess.Popen) -> bool:
    import socket

    assert process.poll() is None, "the HTTP fixture server exited"
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def big_fixture():
    from test_mcp import big_fixture as load

    return load()


def over_the_cap_of_older_sse(pool: ServerPool, cfg: ServerConfig, tool: str, **arguments) -> bool:
    """Over the older SSE transport (the SDK's `sse_client`, which takes no event over 1 MiB) a long
    reply fails its call, saying why, and the next call reconnects. True when that was checked."""
    if cfg.transport != "sse":
        return False
    with pytest.raises(Unavailable, match="no message may pass 1 MiB") as raised:
        call(pool, cfg, tool, **arguments)
    assert raised.value.retryable and "streamable HTTP" in raised.value.message
    assert call(pool, cfg, "ping").texts == ["pong"]
    return True


@pytest.mark.slow
def test_a_long_text_arrives_whole_from_a_file(big_http):
    pool, cfg = big_http
    if over_the_cap_of_older_sse(pool, cfg, "blob", megabytes=3):
        return
    (text,) = call(pool, cfg, "blob", megabytes=3).texts
    assert type(text) is LongText
    expected = hashlib.sha256(big_fixture().blob_text(3).encode()).hexdigest()
    assert hashlib.sha256(str(text).encode()).hexdigest() == expected


@pytest.mark.slow
@pytest.mark.parametrize("tool", ["rows", "listing", "pictured_rows"])
def test_long_structured_content_is_written_to_a_file_and_reads_the_same(big_http, tool):
    pool, cfg = big_http
    if over_the_cap_of_older_sse(pool, cfg, tool, megabytes=2):
        return
    result = call(pool, cfg, tool, megabytes=2)
    assert type(result.structured) is LongJSON
    rows = big_fixture().rows(2)
    assert result.structured.parsed() == (rows["rows"] if tool == "listing" else rows)
    assert len(result.images) == (1 if tool == "pictured_rows" else 0)


def test_short_results_errors_and_refusals_are_as_through_the_session(big_http):
    pool, cfg = big_http
    assert call(pool, cfg, "ping").texts == ["pong"]
    bad = call(pool, cfg, "blob", megabytes="lots")  # fails the tool's own argument check
    assert bad.is_error and "megabytes" in bad.texts[0]
    assert call(pool, cfg, "ping").texts == ["pong"]


@pytest.fixture(scope="module", params=["--http", "--sse"])
def slow_http(request):
    port = free_port()
    process = start_http_server(port, request.param, script="slow.py")
    pool = ServerPool()
    yield pool, served("older-sse" if request.param == "--sse" else "sse", port, "slow")
    run(pool.close())
    process.kill()
    process.wait()


def test_progress_reaches_the_caller(slow_http):
    pool, cfg = slow_http
    seen = []
    result = call(pool, cfg, "wait", ctx(lambda *report: seen.append(report)), steps=3, step_seconds=0.05)
    assert result.texts == ["waited 3 steps"]
    assert seen == [(1, 3, "step 1 of 3"), (2, 3, "step 2 of 3"), (3, 3, "step 3 of 3")]


def test_a_log_and_a_server_s_request_in_the_call_s_stream_reach_the_session(slow_http):
    # `asks` pings the client in the call's stream, and waits for the answer: only the session answers
    # it. `chatty` logs, and pings on the session's own stream.
    pool, base = slow_http
    cfg = ServerConfig(base.name, base.transport, url=base.url, timeout=20)  # unanswered, the ping would wait it out
    assert call(pool, cfg, "asks").texts == ["answered on the call's stream"]
    assert call(pool, cfg, "chatty").texts == ["answered"]


def test_a_call_past_its_timeout_is_cancelled_on_the_server_and_the_session_serves_on(slow_http):
    pool, base = slow_http
    cfg = ServerConfig(base.name, base.transport, url=base.url, timeout=0.5)
    with pytest.raises(Unavailable, match="within 0.5 s"):
        call(pool, cfg, "wait", steps=1, step_seconds=30)
    assert call(pool, cfg, "ping").texts == ["pong"]
    deadline = time.monotonic() + 30
    while "cancelled" not in call(pool, cfg, "history").structured and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "cancelled" in call(pool, cfg, "history").structured


# --- a server that answers as no server should -----------------------------------------------

@pytest.fixture
def hostile_http():
    port = free_port()
    process = subprocess.Popen([sys.executable, str(SERVERS / "hostile_http.py"), str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: _listening(port, process), "the HTTP server to listen")
    pool = ServerPool()
    yield pool, ServerConfig("hostile", "http", url=f"http://127.0.0.1:{port}/mcp")
    run(pool.close())
    process.kill()
    process.wait()


@pytest.mark.parametrize("tool, error", [
    ("garbage", "the server sent a message that is not JSON"),
    ("not_rpc", "the server's answer to the call is not a JSON-RPC result"),
    ("wrong_type", "the server answered with content of type 'text/html'"),
    ("http_500", "the server answered HTTP 500"),
    ("rpc_error", "no such repository"),
    ("huge_skeleton", "the server's reply was not taken in: it holds more than 1 MiB outside its long strings"),
    ("deep", "the server's reply is nested too deep to read"),
    ("elsewhere", "the server redirected the call to another origin"),
])
def test_a_reply_that_is_not_one_fails_its_call_and_the_server_serves_on(hostile_http, monkeypatch, tool, error):
    from toolkernel._providers._mcp import _spool

    monkeypatch.setattr(_spool, "HELD_CAP", 1 << 20)
    pool, cfg = hostile_http
    result = call(pool, cfg, tool)
    assert result.is_error and error in result.texts[0], result.texts
    assert call(pool, cfg, "json_body").texts == ["json_body answered"]


def test_lines_ended_every_way_in_pieces_of_three_bytes_read_as_one_result(hostile_http):
    pool, cfg = hostile_http
    assert call(pool, cfg, "odd_lines").texts == ["odd_lines answered"]


def test_progress_for_another_token_is_not_the_call_s(hostile_http):
    pool, cfg = hostile_http
    seen = []
    assert call(pool, cfg, "progress", ctx(lambda *report: seen.append(report))).texts == ["progress answered"]
    assert seen == [(1, 2, "half")]


def test_a_same_origin_redirect_is_followed(hostile_http):
    pool, cfg = hostile_http
    assert call(pool, cfg, "redirect").texts == ["redirect answered"]


@pytest.mark.parametrize("tool", ["ends_early", "gone"])
def test_a_stream_that_ends_without_the_result_or_a_lost_session_restarts_the_connection(hostile_http, tool):
    pool, cfg = hostile_http
    tools = by_name(run(pool.tools(cfg)))
    with pytest.raises(Unavailable, match="stopped answering") as raised:
        run(tools[tool].call({}, ctx()))
    assert raised.value.retryable
    assert call(pool, cfg, "json_body").texts == ["json_body answered"]  # a new connection


@pytest.mark.skipif(MAJOR < 2, reason="mcp 1.x negotiates no 2026 protocol: its session never sends one")
def test_a_newer_protocol_keeps_the_session_s_path():
    lane = _http_lane.HttpLane("http://127.0.0.1:1/mcp")
    lane.open(object(), object())
    assert lane.usable
    run(lane.watch(_request({"mcp-protocol-version": "2026-07-28"})))
    assert not lane.usable


def _request(headers):
    from toolkernel._mcp_sdk import httpx

    return httpx.Request("POST", "http://127.0.0.1:1/mcp", headers=headers)


@pytest.mark.parametrize("path, error", [
    # The SDK's `sse_client` waits for what it will never use: the connect's own time limit ends it.
    ("/sse-elsewhere", "did not finish starting within 2 s"),
    ("/sse-silent", "closed its event stream before it named its endpoint"),
])
def test_an_older_sse_server_that_names_no_endpoint_of_its_own_is_not_used(hostile_http, path, error):
    pool, cfg = hostile_http
    pool.connect_timeout = 2
    with pytest.raises(Unavailable, match=error):
        run(pool.tools(ServerConfig("older", "sse", url=cfg.url.replace("/mcp", path))))


@pytest.mark.slow
def test_an_older_sse_reply_that_is_not_one_fails_its_call(hostile_http):
    pool, base = hostile_http
    cfg = ServerConfig("older", "sse", url=base.url.replace("/mcp", "/sse"))
    result = call(pool, cfg, "rpc_error")
    assert result.is_error and "no such repository" in result.texts[0], result.texts
    with pytest.raises(Unavailable, match="no message may pass 1 MiB"):  # over the SDK's cap on one event
        call(pool, cfg, "huge_skeleton")
    assert call(pool, cfg, "progress").texts == ["progress answered"]
    assert call(pool, cfg, "odd_token").texts == ["odd_token answered"]


def test_a_message_past_the_session_s_cap_that_answers_no_call_is_dropped_unread(hostile_http, monkeypatch):
    monkeypatch.setattr(_http_lane, "SESSION_CAP", 1 << 20)
    read = []

    def spy(data, parse=_http_lane.message_of):
        read.append(data.size)
        return parse(data)

    monkeypatch.setattr(_http_lane, "message_of", spy)
    pool, cfg = hostile_http
    assert call(pool, cfg, "big_log").texts == ["big_log answered"]
    assert all(size < 1 << 20 for size in read)  # the 3 MB log was never parsed (a short reply: not by this)
    assert call(pool, cfg, "json_body").texts[0].endswith("answered")


def test_over_older_sse_a_message_past_1_mib_ends_the_call_saying_why(hostile_http):
    pool, base = hostile_http
    cfg = ServerConfig("older", "sse", url=base.url.replace("/mcp", "/sse"))
    with pytest.raises(Unavailable, match="no message may pass 1 MiB"):
        call(pool, cfg, "big_log")
    assert call(pool, cfg, "progress").texts[0].endswith("answered")  # a new connection
