"""Fixture: a streamable-HTTP server, written on raw sockets, that answers tool calls as no
well-behaved server would: text that is not JSON, a reply that is not JSON-RPC, the wrong
content type, HTTP errors, a stream that ends without the result, a forgotten session, a
redirect, a message nested too deep, and one good result written a few bytes at a time
with every line ending SSE allows.

`python hostile_http.py PORT` serves http://127.0.0.1:PORT/mcp. The handshake and the tool
list are answered properly (as JSON bodies), so a client gets as far as calling a tool. The
older SSE transport is served at /sse (messages POSTed to /messages, answered on the stream);
/sse-elsewhere names an endpoint on another origin, and /sse-silent names none.
"""

if __name__ == "__main__":  # the suite's fork server runs it, when there is one (see _zygote.py)
    import sys

    sys.path.insert(0, __file__.rpartition("/")[0])  # toolkernel sets PYTHONSAFEPATH
    import _zygote

    del sys.path[0]
    _zygote.hand_over()

import asyncio
import json
import sys

TOOLS = ["garbage", "not_rpc", "wrong_type", "http_500", "rpc_error", "ends_early", "huge_skeleton", "progress",
         "gone", "redirect", "elsewhere", "deep", "odd_lines", "json_body", "odd_token", "big_log"]
SESSION = "hostile-session"


def tool(name: str) -> dict:
    return {"name": name, "description": f"the {name} case", "inputSchema": {"type": "object"}}


def result(request_id, text: str) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": text}]}}


def event(message, kind: str = "") -> bytes:
    data = message if isinstance(message, bytes) else json.dumps(message).encode()
    return (b"event: " + kind.encode() + b"\n" if kind else b"") + b"data: " + data + b"\n\n"


async def respond(writer, status: int, body: bytes = b"", kind: str = "application/json", **headers: str) -> None:
    head = [f"HTTP/1.1 {status} X", f"content-type: {kind}", f"content-length: {len(body)}",
            f"mcp-session-id: {SESSION}", *(f"{k.replace('_', '-')}: {v}" for k, v in headers.items())]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
    await writer.drain()


async def stream(writer, pieces, step: int = 0) -> None:
    """An SSE response, closed at its end (no length): in `step`-byte writes when `step`."""
    writer.write(f"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nmcp-session-id: {SESSION}\r\n"
                 "connection: close\r\n\r\n".encode())
    for piece in pieces:
        for start in range(0, len(piece), step or len(piece) or 1):
            writer.write(piece[start:start + step] if step else piece)
            await writer.drain()
            if step:
                await asyncio.sleep(0.001)


REFUSED = {"code": -32602, "message": "no such repository"}
# Calls answered with one plain response: (status, body, content type, more headers).
PLAIN = {
    "wrong_type": (200, b"<html>hello</html>", "text/html", {}),
    "http_500": (500, b"Internal Server Error", "text/plain", {}),
    "rpc_error": (400, json.dumps({"jsonrpc": "2.0", "id": None, "error": REFUSED}).encode(), "application/json", {}),
    "gone": (404, b"", "application/json", {}),
    "elsewhere": (307, b"", "application/json", {"location": "http://example.invalid/mcp"}),
}


def big_log() -> dict:
    """A log notification of 3 MB, before a call's result."""
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x" * 3_000_000}}


def huge_skeleton(request_id: str) -> bytes:
    """3 MB of small numbers as structured content: all skeleton, no long string."""
    numbers = b"[" + b",".join(b"%d" % n for n in range(450_000)) + b"]"
    return b'{"jsonrpc":"2.0","id":"%s","result":{"content":[],"structuredContent":{"n":%s}}}' % (
        request_id.encode(), numbers)


async def call(writer, request_id, name: str, path: str) -> bool:
    """Answer a tools/call; True when the connection is to close."""
    good = result(request_id, f"{name} answered")
    if name in PLAIN:
        status, body, kind, headers = PLAIN[name]
        await respond(writer, status, body, kind=kind, **headers)
        return False
    if name == "redirect" and path == "/mcp":
        await respond(writer, 307, b"", location="/mcp/again")
        return False
    if name == "garbage":
        await stream(writer, [event(b"this is not JSON {")])
    elif name == "not_rpc":
        await stream(writer, [event({"jsonrpc": "2.0", "id": request_id, "result": 5})])
    elif name == "ends_early":
        await stream(writer, [event({"jsonrpc": "2.0", "method": "notifications/message",
                                     "params": {"level": "info", "data": "starting"}})])
    elif name == "huge_skeleton":
        await stream(writer, [event(huge_skeleton(request_id))])
    elif name == "big_log":
        await stream(writer, [event(big_log()), event(good)])
    elif name == "progress":
        forged = {"jsonrpc": "2.0", "method": "notifications/progress",
                  "params": {"progressToken": "someone-else", "progress": 99}}
        mine = {"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": request_id, "progress": 1, "total": 2, "message": "half"}}
        await stream(writer, [event(forged), event(mine), event(good)])
    elif name == "deep":
        await stream(writer, [event(b'{"jsonrpc":"2.0","id":"%s","result":{"content":%s}}' % (
            request_id.encode(), b"[" * 200_000 + b"]" * 200_000))])
    elif name == "odd_lines":  # a priming event, a comment, an unknown event, split data lines, CR, CRLF
        text = json.dumps(good).encode()
        half = text.index(b', "id"') + 1  # between two members: the newline joining data lines is whitespace
        await stream(writer, [b"id: 1\r\ndata:\r\n\r\n", b": a comment\r", b"event: other\ndata: {}\n\n",
                              b"event: message\rdata:" + text[:half] + b"\r\ndata:" + text[half:] + b"\r\n\r\n"],
                     step=3)
    elif name == "json_body":
        await respond(writer, 200, json.dumps(good).encode())
        return False
    else:
        await stream(writer, [event(good)])
    return True


STREAMS = []  # the open /sse streams' writers: the older transport answers there


def handshake(message: dict) -> dict | None:
    """The answer to a message that is not a tool call (None for a notification)."""
    if "id" not in message:
        return None
    if message["method"] == "initialize":
        return {"jsonrpc": "2.0", "id": message["id"], "result": {
            "protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
            "serverInfo": {"name": "hostile-http", "version": "1"}}}
    if message["method"] == "tools/list":
        return {"jsonrpc": "2.0", "id": message["id"], "result": {"tools": [tool(n) for n in TOOLS]}}
    return {"jsonrpc": "2.0", "id": message["id"], "result": {}}


def older_call(request_id, name: str) -> list[bytes]:
    """The events that answer a tool call over the older SSE transport."""
    if name == "huge_skeleton":
        return [event(huge_skeleton(request_id))]
    if name == "rpc_error":
        return [event({"jsonrpc": "2.0", "id": request_id, "error": REFUSED})]
    if name == "big_log":
        return [event(big_log()), event(result(request_id, f"{name} answered"))]
    forged = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "x", "progress": 9}}
    if name == "odd_token":  # a token no dict can be keyed by
        forged["params"]["progressToken"] = ["x"]
    return [event(forged), event(result(request_id, f"{name} answered"))]


async def older_stream(writer, path: str) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
    if path == "/sse-silent":
        return
    where = "http://example.invalid/messages" if path == "/sse-elsewhere" else "/messages?session=1"
    writer.write(event(where.encode(), "endpoint"))
    await writer.drain()
    STREAMS.append(writer)
    while not writer.is_closing():
        await asyncio.sleep(0.5)


async def older_message(writer, message: dict) -> None:
    await respond(writer, 202)
    if message.get("method") == "tools/call":
        events = older_call(message["id"], message["params"]["name"])
    else:
        answer = handshake(message)
        events = [event(answer)] if answer is not None else []
    for stream_writer in STREAMS[-1:]:
        for each in events:
            stream_writer.write(each)
        await stream_writer.drain()


async def handle(reader, writer) -> None:
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            method, path, _ = line.decode().split(" ", 2)
            headers = {}
            while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
                key, _, value = header.decode().partition(":")
                headers[key.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", 0)))
            if method == "GET" and path.startswith("/sse"):
                return await older_stream(writer, path)
            if method != "POST":
                await respond(writer, 405 if method == "GET" else 200)
                continue
            message = json.loads(body)
            if path.startswith("/messages"):
                await older_message(writer, message)
            elif message.get("method") == "tools/call":
                if await call(writer, message["id"], message["params"]["name"], path):
                    return
            else:
                answer = handshake(message)
                await respond(writer, 202) if answer is None else await respond(writer, 200, json.dumps(answer).encode())
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def main(port: int) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
