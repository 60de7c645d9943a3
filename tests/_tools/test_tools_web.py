import asyncio
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from toolkernel._tool import Image, ToolContext
from toolkernel._providers._tools.web import Hop, MAX_BYTES, RESULT_LIMIT, non_public_reason, pinned_url, web_fetch

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


class Handler(BaseHTTPRequestHandler):
    routes: dict = {}

    def do_GET(self):
        self.server.seen.append((self.path, dict(self.headers)))
        route = self.server.routes.get(self.path.split("?")[0])
        if route is None:
            self._send(404, "text/plain", b"no such page")
            return
        route(self)

    def _send(self, status, ctype, body, extra=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture()
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.seen = []
    port = httpd.server_address[1]
    base = f"http://127.0.0.1:{port}"

    def redirect(target):
        return lambda h: h._send(302, "text/plain", b"", [("Location", target)])

    def big(h):
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.end_headers()
        chunk = b"y" * 65536
        try:
            for _ in range(3 * MAX_BYTES // len(chunk)):
                h.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading at its cap, as it should

    def long_text(h):
        h._send(200, "text/plain; charset=utf-8", LONG_TEXT.encode())

    httpd.routes = {
        "/page": lambda h: h._send(200, "text/html; charset=utf-8",
                                   "<html><head><title>t</title><script>evil()</script></head><body>"
                                   "<h1>Héllo</h1><p>Some <b>bold</b> <a href='/x'>link</a></p></body></html>".encode()),
        "/text": lambda h: h._send(200, "text/plain", b"plain words\n"),
        "/json": lambda h: h._send(200, "application/json", b'{"a": 1}'),
        "/image": lambda h: h._send(200, "image/png", PNG),
        "/headers": lambda h: h._send(200, "application/json", json.dumps(dict(h.headers)).encode()),
        "/missing": lambda h: h._send(404, "text/plain", b"gone"),
        "/hop": redirect("/text"),
        "/hop-relative": redirect("page"),
        "/to-private": redirect("http://10.0.0.1/secret"),
        "/to-localhost": redirect(f"http://localhost:{port}/text"),
        "/to-metadata": redirect("http://169.254.169.254/latest/meta-data/"),
        "/loop": redirect("/loop"),
        "/big": big,
        "/long": long_text,
        "/long-missing": lambda h: h._send(404, "text/plain", LONG_TEXT.encode()),
    }
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield base, httpd
    httpd.shutdown()
    httpd.server_close()


# 100 KB of numbered lines: the head, the tail and the omitted middle are all recognisable.
LONG_TEXT = "".join(f"line {n:06d}\n" for n in range(8000))


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # saved outputs land in the test's own folder
    return tmp_path


def fetch(args, allow=("127.0.0.1",)):
    ctx = ToolContext(workdir=Path("."), settings={"allow_hosts": list(allow)})  # its own [tools.web_fetch] table
    return asyncio.run(web_fetch.call(args, ctx))


def text(result):
    return "\n".join(result.texts)


def test_html_becomes_markdown(server):
    base, _ = server
    result = fetch({"url": f"{base}/page"})
    assert not result.is_error
    body = text(result)
    assert "# Héllo" in body and "**bold**" in body and "[link](/x)" in body
    assert "evil" not in body and "<p>" not in body


def test_text_json_and_images(server):
    base, _ = server
    assert text(fetch({"url": f"{base}/text"})) == "plain words\n"
    assert text(fetch({"url": f"{base}/json"})) == '{"a": 1}'
    assert fetch({"url": f"{base}/image"}).images == [Image(PNG, "image/png")]


def test_http_error_is_an_error_result(server):
    base, _ = server
    result = fetch({"url": f"{base}/missing"})
    assert result.is_error and "404" in text(result) and "gone" in text(result)


def test_redirects_are_followed_and_named(server):
    base, _ = server
    result = fetch({"url": f"{base}/hop"})
    assert text(result) == f"(redirected to {base}/text)\n\nplain words\n"
    assert "# Héllo" in text(fetch({"url": f"{base}/hop-relative"}))


def test_redirect_loop_stops_after_ten(server):
    base, httpd = server
    result = fetch({"url": f"{base}/loop"})
    assert result.is_error and "more than 10 redirects" in text(result)
    assert len(httpd.seen) == 11


def test_extra_headers_are_sent_but_host_stays(server):
    base, _ = server
    result = fetch({"url": f"{base}/headers", "headers": {"X-Probe": "yes", "Host": "evil.example"}})
    sent = json.loads(text(result))
    assert sent["X-Probe"] == "yes"
    assert sent["Host"] == base.removeprefix("http://")


def test_reads_at_most_two_megabytes(server, in_tmp):
    base, _ = server
    body = text(fetch({"url": f"{base}/big"}))
    saved = in_tmp / body.split("is in ", 1)[1].split("]", 1)[0]
    content, note = saved.read_text().split("\n\n")
    assert content == "y" * MAX_BYTES
    assert note == f"(only the first {MAX_BYTES} bytes of the response were read)"
    assert body.endswith(note)  # the note is in the tail the result shows


def saved_path(body: str) -> Path:
    marker = body.split("\n... [", 1)[1].split("] ...\n", 1)[0]
    return Path(marker.rsplit(" is in ", 1)[1])


def test_a_result_over_32_kb_shows_head_and_tail_and_saves_the_whole(server, in_tmp):
    base, _ = server
    body = text(fetch({"url": f"{base}/long"}))
    half = RESULT_LIMIT // 2
    assert len(LONG_TEXT) > RESULT_LIMIT and len(body) < RESULT_LIMIT + 200
    assert body.startswith(LONG_TEXT[:half]) and body.endswith(LONG_TEXT[-half:])
    assert "line 004000" not in body  # the middle is left out
    assert f"{len(LONG_TEXT) - 2 * half} characters omitted" in body
    path = saved_path(body)
    assert path.parts[:2] == (".toolkernel", "outputs") and path.name.startswith("web-fetch-")
    assert (in_tmp / path).read_text() == LONG_TEXT


def test_a_result_of_32_kb_or_less_is_whole_and_saves_nothing(server, in_tmp):
    base, httpd = server
    httpd.routes["/exact"] = lambda h: h._send(200, "text/plain", LONG_TEXT[:RESULT_LIMIT].encode())
    assert text(fetch({"url": f"{base}/exact"})) == LONG_TEXT[:RESULT_LIMIT]
    assert not (in_tmp / ".toolkernel").exists()


def test_a_long_error_page_is_cut_too(server, in_tmp):
    base, _ = server
    result = fetch({"url": f"{base}/long-missing"})
    body = text(result)
    assert result.is_error and body.startswith("HTTP 404") and len(body) < RESULT_LIMIT + 200
    assert (in_tmp / saved_path(body)).read_text().endswith(LONG_TEXT.rstrip())


def test_loopback_refused_without_allow_and_never_contacted(server):
    base, httpd = server
    result = fetch({"url": f"{base}/text"}, allow=())
    assert result.is_error and "loopback" in text(result) and "allow_hosts" in text(result)
    assert httpd.seen == []
    port = base.rsplit(":", 1)[1]
    assert fetch({"url": f"http://localhost:{port}/text"}, allow=()).is_error
    assert fetch({"url": f"http://2130706433:{port}/text"}, allow=()).is_error  # 127.0.0.1 as a number
    assert httpd.seen == []


def test_redirect_from_allowed_host_to_private_address_is_refused(server):
    base, httpd = server
    for route, reason in (("/to-private", "private"), ("/to-localhost", "loopback"), ("/to-metadata", "link-local")):
        httpd.seen.clear()
        result = fetch({"url": f"{base}{route}"})
        assert result.is_error and reason in text(result), text(result)
        assert [path for path, _ in httpd.seen] == [route]  # the refused hop was never requested


def test_metadata_address_refused_before_any_connection(monkeypatch):
    attempts = []
    real_connect = socket.socket.connect
    real_create = asyncio.BaseEventLoop.create_connection

    def record_connect(sock, address):
        attempts.append(address)
        return real_connect(sock, address)

    async def record_create(loop, *args, **kwargs):
        attempts.append((args, kwargs))
        return await real_create(loop, *args, **kwargs)

    # nothing else can show that no packet left: watch the two ways a socket connects
    monkeypatch.setattr(socket.socket, "connect", record_connect)
    monkeypatch.setattr(asyncio.BaseEventLoop, "create_connection", record_create)
    for url in ("http://169.254.169.254/latest/meta-data/", "http://[fe80::1]/", "http://100.64.1.1/",
                "http://0.0.0.0:80/", "http://192.168.1.1/", "http://[::ffff:10.0.0.1]/"):
        result = fetch({"url": url}, allow=())
        assert result.is_error and "refused" in text(result), url
    assert attempts == []


def test_non_http_schemes_refused():
    assert fetch({"url": "file:///etc/passwd"}).is_error
    assert fetch({"url": "ftp://example.com/"}).is_error


@pytest.mark.parametrize("address, reason", [
    ("127.0.0.1", "loopback"), ("10.1.2.3", "private"), ("172.16.0.1", "private"), ("192.168.0.1", "private"),
    ("169.254.169.254", "link-local"), ("100.64.0.1", "carrier-grade NAT"), ("0.0.0.0", "unspecified"),
    ("224.0.0.1", "multicast"), ("::1", "loopback"), ("fd12::1", "private"), ("fe80::1", "link-local"),
    ("::ffff:127.0.0.1", "loopback"), ("64:ff9b::a00:1", "private"),
    ("2002:7f00:1::", "loopback"), ("2002:a9fe:a9fe::1", "link-local"), ("fec0::1", "non-public"),
    ("2002:808:808::1", None),
    ("8.8.8.8", None), ("1.1.1.1", None), ("2606:4700:4700::1111", None),
])
def test_address_classes(address, reason):
    assert non_public_reason(address) == reason


def test_pinned_url_keeps_path_and_query():
    hop = Hop("https://example.com/a/b?q=1#frag", "example.com", 443, ("2606:2800:220:1::1",))
    assert pinned_url(hop, hop.addresses[0]) == "https://[2606:2800:220:1::1]:443/a/b?q=1"
    hop = Hop("http://example.com", "example.com", 80, ("93.184.216.34",))
    assert pinned_url(hop, "93.184.216.34") == "http://93.184.216.34:80/"


def test_allowed_name_tries_each_checked_address(server):
    base, httpd = server
    port = base.rsplit(":", 1)[1]
    # localhost may resolve to ::1 first while the server listens on 127.0.0.1 only
    result = fetch({"url": f"http://localhost:{port}/headers"}, allow=("localhost",))
    assert not result.is_error, text(result)
    assert json.loads(text(result))["Host"] == f"localhost:{port}"


# -- after the post-call hooks -----------------------------------------------------------

SECRET = "internal-host-7f3a.corp"
REDACT_HOOK = f"import json, sys; json.load(sys.stdin); print(json.dumps({{'redact': [{SECRET!r}]}}))"


def test_a_post_call_hook_redacts_the_saved_whole_of_a_cut_result_too(server, in_tmp, monkeypatch):
    """A page over 32 KB is saved whole and the script reads that file: a post-call hook that hides
    a secret must have hidden it there too, or the script reads it past the hook."""
    import sys

    from kernel_helpers import RecordingSink, project_with
    from toolkernel._session import Session

    base, httpd = server
    page = LONG_TEXT[:20_000] + f"see {SECRET}\n" + LONG_TEXT[:20_000]  # the secret in the middle
    httpd.routes["/inner"] = lambda h: h._send(200, "text/plain", page.encode())
    project = project_with(in_tmp, monkeypatch, (
        '[tools.web_fetch]\nallow_hosts = ["127.0.0.1"]\n'
        f'[[hooks]]\nevent = "post_call"\nmatch = "web_fetch"\ncommand = [{json.dumps(sys.executable)}, "-c", '
        f'{json.dumps(REDACT_HOOK)}]\n'))
    session = Session(project)
    try:
        sink = RecordingSink()
        script = (f"tools web-fetch url={base}/inner > page.txt; "
                  "saved=$(grep -o '.toolkernel/outputs/[^ ]*txt' page.txt); grep see \"$saved\"; "
                  "tools read-file path=\"$saved\" limit=100000 | grep see")
        result = session.run_script(script, sink)
        assert result.exit_code == 0, sink.stderr_text
        assert SECRET not in sink.stdout_text, "the script read the secret the hook hides, in the saved whole"
        assert sink.stdout_text.count("see [redacted]") == 2, sink.stdout_text[:300]  # the file, then read-file
        assert not any(SECRET in path.read_text() for path in (in_tmp / "project" / ".toolkernel").rglob("*.txt"))
    finally:
        session.close()
