"""The sandbox's way out for a network grant (`toolkernel/_egress.py`, `_netbridge.py`).

Where a grant may go is pure (domains, addresses); the proxy is a real one on a Unix socket;
and `pip install` runs in a real agent cell, through the bridge and the proxy, from a package
index served on loopback from a folder holding a wheel made here. This machine has no way to
the internet, so that one test lets the proxy reach the index's loopback address alone (the
check that refuses it is the thing stubbed); the others hold the real check.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from approval_helpers import Answering
from kernel_helpers import RecordingSink, isolated_env, policy_toml, write_config
from toolkernel import _egress
from toolkernel._approval._approver import Answer
from toolkernel._sandbox import mechanism


@pytest.mark.parametrize("host, port, allowed", [
    ("pypi.org", 443, True), ("PyPI.org.", 80, True), ("pypi.org", 8443, False), ("evil-pypi.org", 443, False),
    ("files.example.org", 443, True), ("example.org", 443, False), ("index.internal", 8080, True),
    ("index.internal", 443, False),
])
def test_a_grant_reaches_the_domains_and_ports_it_names(host, port, allowed):
    assert _egress.allows(host, port, ("pypi.org", "*.example.org", "index.internal:8080")) is allowed


@pytest.mark.parametrize("address", ["127.0.0.1", "127.8.8.8", "::1", "10.1.2.3", "172.16.0.1", "192.168.1.1",
                                     "169.254.169.254", "100.64.0.1", "fe80::1", "fd00::1", "::ffff:127.0.0.1",
                                     "0.0.0.0", "224.0.0.1"])
def test_loopback_private_and_link_local_addresses_are_never_reached(address):
    assert _egress.forbidden(address)


@pytest.mark.parametrize("address", ["64:ff9b::7f00:1", "64:ff9b::a00:1", "::7f00:1", "::ffff:0:7f00:1",
                                     "2002:7f00:1::", "2002:c0a8:101::1", "64:ff9b:1::a00:1",
                                     "2001:0:4136:e378:8000:63bf:3fff:fdd2"])  # Teredo, its server 65.54.227.120
def test_an_ipv6_address_carrying_a_loopback_or_private_ipv4_one_is_never_reached(address):
    """NAT64, 6to4, SIIT and IPv4-compatible forms lead a translator or tunnel to the IPv4 address
    inside (and a Teredo one to its client, here 192.0.2.45: documentation, not global)."""
    assert _egress.forbidden(address)


def test_a_public_address_may_be_reached_unless_it_is_this_machines():
    assert not _egress.forbidden("64:ff9b::808:808")  # 8.8.8.8 behind NAT64
    assert not _egress.forbidden("151.101.0.223")
    for own in _egress._own_addresses():
        assert _egress.forbidden(own)


def test_the_default_domains_are_the_package_indexes_configured(tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://devpi.example.com:3141/root/pypi/+simple/\n")
    found = _egress.package_indexes({"PIP_CONFIG_FILE": str(conf), "HOME": str(tmp_path),
                                     "UV_INDEX_URL": "https://uv.example.org/simple"})
    assert found[:2] == ("uv.example.org", "devpi.example.com:3141") and "pypi.org" in found


def _ask(proxy: str, request: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as client:
        client.connect(proxy)
        client.sendall(request)
        return client.recv(4096)


def test_the_proxy_refuses_a_domain_not_granted_and_any_loopback_address():
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    proxy = _egress.proxy_for(("localhost:%d" % port, "127.0.0.1:%d" % port))
    try:
        for request in (f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n", f"CONNECT localhost:{port} HTTP/1.1\r\n\r\n",
                        f"GET http://localhost:{port}/api HTTP/1.1\r\nHost: localhost\r\n\r\n"):
            answer = _ask(proxy, request.encode())
            assert answer.startswith(b"HTTP/1.1 403") and b"never reached" in answer, answer
        answer = _ask(proxy, b"CONNECT example.com:443 HTTP/1.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 403") and b"not among the domains" in answer
    finally:
        server.close()


# -- pip install through the proxy -------------------------------------------------------------


def _wheel(folder: Path) -> Path:
    """A three-line project's wheel, written as a wheel is: a zip with its metadata and record."""
    name = "tinypkg-1.0-py3-none-any.whl"
    files = {"tinypkg/__init__.py": "VALUE = 'installed through the proxy'\n",
             "tinypkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
             "tinypkg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{path},,\n" for path in files) + "tinypkg-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(folder / name, "w") as wheel:
        for path, text in {**files, "tinypkg-1.0.dist-info/RECORD": record}.items():
            wheel.writestr(path, text)
    return folder / name


@pytest.fixture
def package_index(tmp_path):
    """A PEP 503 index (`simple/tinypkg/`) on loopback, served from a folder."""
    root = tmp_path / "index"
    (root / "simple" / "tinypkg").mkdir(parents=True)
    wheel = _wheel(root)
    (root / "simple" / "tinypkg" / "index.html").write_text(f'<a href="../../{wheel.name}">{wheel.name}</a>\n')
    handler = lambda *args: http.server.SimpleHTTPRequestHandler(*args, directory=str(root))  # noqa: E731
    http.server.SimpleHTTPRequestHandler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    server.shutdown()
    server.server_close()


@pytest.mark.skipif(mechanism().name != "bubblewrap" and not os.environ.get("CI"), reason="the proxy is bubblewrap's")
def test_pip_installs_from_the_configured_index_through_the_proxy(tmp_path, monkeypatch, package_index):
    from toolkernel._runners._hostbash._channel import Channel
    from toolkernel._runners._hostbash._runner import HostBashRunner
    from toolkernel._session import Session

    for key, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PIP_INDEX_URL", package_index)  # the person's index: the grant's default domain
    monkeypatch.delenv("TOOLKERNEL_SANDBOX", raising=False)
    refused = _egress.forbidden
    monkeypatch.setattr(_egress, "forbidden", lambda address: address != "127.0.0.1" and refused(address))
    work = tmp_path / "work"
    work.mkdir()
    pip = f"{sys.executable} -m pip install"
    write_config(work, policy_toml(allow=["Bash(*)"]) + f"network = [{json.dumps(f'Bash({pip} *)')}]\n\n"
                 '[sandbox]\nenv = ["PIP_INDEX_URL"]\n')
    session, channel = Session(work), Channel()
    try:
        sink = RecordingSink()
        script = f"{pip} --no-cache-dir --disable-pip-version-check --target pkgs tinypkg"
        result = session.run_script(script, sink, runner=HostBashRunner(channel, agent=True),
                                    approver=Answering(Answer.ONCE))
        assert result.exit_code == 0, "".join(sink.err)
        sink = RecordingSink()
        session.run_script(f"{sys.executable} -c \"import sys; sys.path.insert(0, 'pkgs'); import tinypkg;"
                           f" print(tinypkg.VALUE)\"", sink, runner=HostBashRunner(channel, agent=True))
        assert "".join(sink.out).strip() == "installed through the proxy", sink.err
    finally:
        channel.close()
        session.close()
