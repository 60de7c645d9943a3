"""The way out of the OS sandbox for a network grant: an HTTP proxy on a Unix socket.

An agent's cell or command tool that a `[policy] network` rule (or a command tool's
`network = true`) gives the network keeps a network namespace of its own all the same; the
proxy's socket is bound into it, and `_netbridge.py` lets its programs reach it as
`HTTPS_PROXY=http://127.0.0.1:3128`, as Anthropic's sandbox runtime does. The proxy takes:

- `CONNECT host:port` (HTTPS, and any TLS) and plain `GET http://host/...` requests, each to
  a host and port the grant names (`[sandbox] domains`; without any, the package indexes
  pip, uv and npm are configured with: `package_indexes`), on 443 or 80 unless a port is
  given;
- only to public addresses: the name is resolved here, and loopback, private, link-local,
  shared, multicast and reserved addresses and the machine's own are never connected to,
  whatever the name says (so a grant for pip cannot reach the Jupyter Server on
  127.0.0.1, a cloud's metadata service, or the host's other services).

A request it refuses is answered `403` with the reason. One proxy serves each list of
domains for the process's life; its socket lies in a private (0700) folder.
"""

from __future__ import annotations

import atexit
import configparser
import functools
import ipaddress
import os
import shutil
import socket
import socketserver
import threading
from pathlib import Path
from typing import Iterable, Mapping
from urllib.parse import urlsplit

from ._netbridge import pipe
from ._tempdirs import private_folder

_HEAD_LIMIT = 65536
_DEFAULT_PORTS = (443, 80)
_CHUNK = 65536  # what one read of a request's head takes
_CONNECT_TIMEOUT = 30.0


# -- where a grant may go (pure) ----------------------------------------------------------


def allows(host: str, port: int, domains: Iterable[str]) -> bool:
    """Whether `host:port` is one `domains` names: `pypi.org` (ports 443 and 80), `*.pypi.org`
    (its subdomains), `host:8443` (that port only). Names compare without case."""
    host = host.lower().rstrip(".")
    for domain in domains:
        name, _, wanted = domain.lower().partition(":")
        ports = (int(wanted),) if wanted else _DEFAULT_PORTS
        if port not in ports:
            continue
        if name.startswith("*.") and host.endswith(name[1:]) and host != name[2:]:
            return True
        if host == name:
            return True
    return False


def forbidden(address: str) -> bool:
    """Whether the proxy refuses to connect to `address`: anything but a public unicast
    address, and every address of this machine; for an IPv6 address that carries an IPv4 one
    (mapped, compatible, 6to4, Teredo, NAT64), that one too, which a translator or tunnel on the
    way would reach (`64:ff9b::7f00:1` is 127.0.0.1 behind NAT64)."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if ip.version == 6 and ip in _LOCAL_NAT64:  # a network's own translator, the IPv4 inside placed as it likes
        return True
    return any(not form.is_global or form.is_multicast or str(form) in _own_addresses() for form in _forms(ip))


_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # the well-known prefix, the IPv4 address last
_LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # SIIT's translated addresses


def _forms(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> list:
    """The address and the IPv4 addresses it carries."""
    if isinstance(ip, ipaddress.IPv4Address):
        return [ip]
    forms: list = [ip, ip.ipv4_mapped, ip.sixtofour, *(ip.teredo or ())]
    low = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _NAT64 or ip in _TRANSLATED or int(ip) >> 32 == 0:  # the last one: IPv4-compatible (::a.b.c.d)
        forms.append(low)
    return [form for form in forms if form is not None]


@functools.lru_cache(maxsize=1)
def _own_addresses() -> frozenset[str]:
    """The addresses of this machine's interfaces (Linux: /proc), public ones included."""
    found: set[str] = set()
    try:
        lines = Path("/proc/net/fib_trie").read_text().splitlines()
    except OSError:
        lines = []
    for before, line in zip(lines, lines[1:]):
        if "/32 host LOCAL" in line:
            found.add(before.split()[-1])
    try:
        for line in Path("/proc/net/if_inet6").read_text().splitlines():
            raw = line.split()[0]
            found.add(str(ipaddress.IPv6Address(int(raw, 16))))
    except (OSError, ValueError, IndexError):
        pass
    return frozenset(found)


def package_indexes(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The hosts (with a port where the URL gives one) of the package indexes pip, uv and npm
    are configured with here: a grant with no `[sandbox] domains` reaches these."""
    urls = [environ.get(name, "") for name in ("PIP_INDEX_URL", "UV_INDEX_URL", "UV_DEFAULT_INDEX",
                                               "npm_config_registry", "NPM_CONFIG_REGISTRY")]
    for name in ("PIP_EXTRA_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_INDEX"):
        urls += environ.get(name, "").split()
    urls += _pip_config(environ)
    hosts = [_host_of(url) for url in urls if url]
    defaults = ["pypi.org", "files.pythonhosted.org", "registry.npmjs.org"]
    return tuple(dict.fromkeys(host for host in [*hosts, *defaults] if host))


def _pip_config(environ: Mapping[str, str]) -> list[str]:
    """`index-url` and `extra-index-url` of pip's config files (global, user, PIP_CONFIG_FILE)."""
    home = Path(environ.get("HOME") or Path.home())
    files = ["/etc/pip.conf", str(home / ".pip" / "pip.conf"),
             str(Path(environ.get("XDG_CONFIG_HOME") or home / ".config") / "pip" / "pip.conf")]
    if environ.get("PIP_CONFIG_FILE"):
        files.append(environ["PIP_CONFIG_FILE"])
    return list(_pip_urls(tuple(files), tuple(_identity(file) for file in files)))


def _identity(path: str) -> tuple | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


@functools.lru_cache(maxsize=8)
def _pip_urls(files: tuple[str, ...], identities: tuple) -> tuple[str, ...]:
    """The URLs pip's config `files` name, as the files are at `identities` (read again for each
    plan otherwise: an agent's every cell would parse them)."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(files, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError):
        return ()
    urls: list[str] = []
    for section in ("global", "install"):
        for key in ("index-url", "extra-index-url"):
            urls += parser.get(section, key, fallback="").split()
    return tuple(urls)


def _host_of(url: str) -> str:
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return ""
    if not host:
        return ""
    return f"{host}:{port}" if port and port not in _DEFAULT_PORTS else host


# -- the proxy ------------------------------------------------------------------------------


class Refused(Exception):
    """A request the proxy does not forward; the message says why."""


def _resolve(host: str, port: int) -> list[str]:
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise Refused(f"{host} could not be resolved ({exc.strerror or exc})") from exc
    return list(dict.fromkeys(info[4][0] for info in found))


def open_upstream(host: str, port: int, domains: tuple[str, ...]) -> socket.socket:
    """A connection to `host:port` if the grant allows it, at a public address only."""
    if not allows(host, port, domains):
        raise Refused(f"{host}:{port} is not among the domains this network grant reaches"
                      f" ({', '.join(domains) or 'none'}); add it to [sandbox] domains")
    addresses = _resolve(host, port)
    public = [address for address in addresses if not forbidden(address)]
    if not public:
        raise Refused(f"{host} resolves to {', '.join(addresses)}: loopback, private and this machine's"
                      " own addresses are never reached from the sandbox")
    try:
        return socket.create_connection((public[0], port), timeout=_CONNECT_TIMEOUT)
    except OSError as exc:
        raise Refused(f"{host}:{port} could not be reached ({exc.strerror or exc})") from exc


class _Handler(socketserver.BaseRequestHandler):
    server: "_Server"

    def handle(self) -> None:
        client = self.request
        try:
            head, rest = _read_head(client)
            method, target, version = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
            if method == "CONNECT":
                host, port = _split_host(target, 443)
                upstream = open_upstream(host, port, self.server.domains)
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                first = rest
            else:
                parts = urlsplit(target)
                if parts.scheme != "http" or not parts.hostname:
                    raise Refused(f"{method} {target[:200]}: only CONNECT and http:// requests pass")
                upstream = open_upstream(parts.hostname, parts.port or 80, self.server.domains)
                first = _origin_request(method, parts, version, head) + rest
        except Refused as exc:
            _refuse(client, str(exc))
            return
        except (OSError, ValueError):
            return
        with upstream:
            if first:
                upstream.sendall(first)
            other = threading.Thread(target=pipe, args=(upstream, client), daemon=True)
            other.start()
            pipe(client, upstream)
            other.join()


def _read_head(client: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(_CHUNK)
        if not chunk or len(data) > _HEAD_LIMIT:
            raise ValueError("no request head")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _split_host(target: str, default: int) -> tuple[str, int]:
    """`host:port`, `[v6]:port` or a bare host."""
    if target.startswith("["):
        host, _, port = target[1:].partition("]")
        port = port.lstrip(":")
    elif target.count(":") == 1:
        host, _, port = target.partition(":")
    else:
        host, port = target, ""
    return host, int(port) if port else default


def _origin_request(method: str, parts, version: str, head: bytes) -> bytes:
    """The request as the origin takes it: its path, the headers but the proxy's own, and
    `Connection: close` (one request per connection: the next may be to another host)."""
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    lines = [f"{method} {path} {version}".encode("latin-1")]
    for line in head.split(b"\r\n")[1:]:
        name = line.split(b":", 1)[0].strip().lower()
        if name not in (b"connection", b"proxy-connection", b"proxy-authorization", b"keep-alive"):
            lines.append(line)
    lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _refuse(client: socket.socket, why: str) -> None:
    body = f"toolkernel's sandbox proxy: {why}\n".encode()
    try:
        client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\n"
                       b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
    except OSError:
        pass


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, domains: tuple[str, ...]) -> None:
        self.domains = domains
        super().__init__(path, _Handler)


_proxies: dict[tuple[str, ...], tuple[_Server, str]] = {}
_lock = threading.Lock()


def proxy_for(domains: tuple[str, ...]) -> str:
    """The socket of the proxy that reaches `domains` (started on first use, kept for the
    process's life)."""
    with _lock:
        kept = _proxies.get(domains)
        if kept is None:
            folder = private_folder("toolkernel-egress-")  # 0700; a killed process's is swept
            path = os.path.join(folder, "proxy.sock")
            server = _Server(path, domains)
            threading.Thread(target=server.serve_forever, name="toolkernel-egress", daemon=True).start()
            kept = _proxies[domains] = (server, path)
        return kept[1]


@atexit.register
def _close() -> None:
    with _lock:
        for server, path in _proxies.values():
            server.shutdown()
            server.server_close()
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
        _proxies.clear()
