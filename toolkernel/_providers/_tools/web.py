"""web_fetch: read a public web page as Markdown (HTML) or text.

Every hop, redirects included, is resolved first and each resolved address
must be on the public internet; the connection then goes to the checked
address (the URL's host is replaced by it and the name is kept for the Host
header and TLS SNI/certificate check), so a second DNS answer cannot steer
the request elsewhere. Hosts listed in `[tools.web_fetch] allow_hosts` skip
the public-address check (local test servers, intranet docs) but are still
pinned to the address resolved for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncIterator, Iterable, Mapping
from urllib.parse import urljoin, urlsplit, urlunsplit

from ..._saved import head_and_tail
from ..._tool import Image, ToolContext, ToolInputError, ToolResult, tool

if TYPE_CHECKING:
    import httpx  # imported where a fetch happens: a first `tools --help` does not need it

TIMEOUT_SECONDS = 30.0
MAX_REDIRECTS = 10
MAX_BYTES = 2 * 1024 * 1024
# Seed 002: a web-fetch result over 32 KB shows its beginning and end; the whole is saved.
RESULT_LIMIT = 32_000
USER_AGENT = "toolkernel-web-fetch/0.1"
_REDIRECT_CODES = {301, 302, 303, 307, 308}
_IMAGE_TYPES = {"image/png", "image/jpeg", "image/gif", "image/webp"}
_HTML_TYPES = {"text/html", "application/xhtml+xml"}
# Ranges `ipaddress` may still call global but that must never be fetched.
_BLOCKED_NETWORKS = tuple(ipaddress.ip_network(net) for net in (
    "0.0.0.0/8", "100.64.0.0/10", "169.254.0.0/16", "192.0.0.0/24", "198.18.0.0/15",
    "224.0.0.0/4", "240.0.0.0/4", "255.255.255.255/32",
    "::/128", "::1/128", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",  # fec0: old site-local
))
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class Refused(ToolInputError):
    """A URL the tool will not fetch."""


@dataclass(frozen=True)
class Hop:
    url: str
    host: str
    port: int
    addresses: tuple[str, ...]  # the checked IPs; the connection goes to one of these


@tool(
    "web_fetch",
    description=(
        "Fetch an http(s) URL. HTML is converted to Markdown, other text is returned as is, "
        "PNG/JPEG/GIF/WebP come back as images. 30 s timeout, at most 10 redirects, at most "
        "2 MB read. A result over 32 KB shows its beginning and end, and names the file under "
        ".toolkernel/outputs/ that keeps all of it (read it with read-file). Addresses not on the public internet (loopback, private networks, "
        "link-local and cloud metadata, carrier-grade NAT) are refused on every hop."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "url": {
                "type": "string",
                "minLength": 1,
                "pattern": "^[Hh][Tt][Tt][Pp][Ss]?://",
                "description": "An http:// or https:// URL.",
            },
            "headers": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "Extra HTTP request headers, e.g. {\"Accept-Language\": \"en\"}. Host cannot be set.",
            },
        },
        "required": ["url"],
        "additionalProperties": False,
    },
    kind="read",
    cut=lambda result, ctx: _cut(result, ctx),  # after the post-call hooks, when there are any
)
async def web_fetch(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult | Image | str:
    import httpx

    url = arguments["url"]
    headers = _request_headers(arguments.get("headers") or {})
    allow_hosts = _allowed_hosts(ctx.settings)
    try:
        async with asyncio.timeout(TIMEOUT_SECONDS):
            result = await _fetch(url, headers, allow_hosts)
    except TimeoutError as exc:
        raise ToolInputError(f"web_fetch: {url} did not answer within {TIMEOUT_SECONDS:g} s") from exc
    except httpx.HTTPError as exc:
        raise ToolInputError(f"web_fetch: fetching {url} failed: {type(exc).__name__}: {exc}") from exc
    return result if ctx.cut_later else _cut(result, ctx)


def _cut(result: ToolResult | Image | str, ctx: ToolContext) -> ToolResult | Image | str:
    """Text over RESULT_LIMIT as its head and tail, the whole saved (an error page too)."""
    if isinstance(result, str):
        return head_and_tail(result, RESULT_LIMIT, ctx.workdir, "web-fetch")
    if isinstance(result, ToolResult):
        result.texts = [head_and_tail(text, RESULT_LIMIT, ctx.workdir, "web-fetch") for text in result.texts]
    return result


def _allowed_hosts(settings: Mapping[str, Any]) -> frozenset[str]:
    return frozenset(str(host).lower().strip("[]") for host in settings.get("allow_hosts") or ())


def _request_headers(extra: Mapping[str, Any]) -> dict[str, str]:
    headers = {"User-Agent": USER_AGENT, "Accept": "text/html,text/markdown,text/plain;q=0.9,*/*;q=0.8"}
    for name, value in extra.items():
        if str(name).lower() == "host":
            continue  # the Host header names the checked host; it is not the caller's to change
        headers[str(name)] = str(value)
    return headers


async def _fetch(url: str, headers: dict[str, str], allow_hosts: frozenset[str]) -> ToolResult | Image | str:
    import httpx

    timeout = httpx.Timeout(TIMEOUT_SECONDS)
    requested = url
    # trust_env=False: an environment proxy would resolve names itself, past our checks
    async with httpx.AsyncClient(timeout=timeout, follow_redirects=False, trust_env=False) as client:
        for _ in range(MAX_REDIRECTS + 1):
            hop = await check_url(url, allow_hosts)
            async with _open(client, hop, headers) as response:
                location = response.headers.get("location")
                if response.status_code in _REDIRECT_CODES and location:
                    url = urljoin(url, location)
                    continue
                body, truncated = await _read_capped(response)
                return _to_result(requested, url, response, body, truncated)
    raise ToolInputError(f"web_fetch: more than {MAX_REDIRECTS} redirects, stopped at {url}")


@contextlib.asynccontextmanager
async def _open(client: httpx.AsyncClient, hop: Hop, headers: dict[str, str]) -> AsyncIterator[httpx.Response]:
    """A streamed GET to the first checked address that accepts the connection."""
    import httpx

    for index, address in enumerate(hop.addresses):
        request = client.build_request("GET", pinned_url(hop, address), headers=_hop_headers(hop, headers),
                                       extensions={"sni_hostname": hop.host})
        try:
            response = await client.send(request, stream=True)
        except httpx.ConnectError:
            if index + 1 == len(hop.addresses):
                raise
            continue  # e.g. localhost answering on 127.0.0.1 but not on ::1
        try:
            yield response
        finally:
            await response.aclose()
        return


async def check_url(url: str, allow_hosts: frozenset[str]) -> Hop:
    """Resolve `url`'s host and refuse it unless every address is public (or the host allowed)."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        raise Refused(f"web_fetch: only http:// and https:// URLs are fetched, not {url}")
    host = (parts.hostname or "").lower()
    if not host:
        raise Refused(f"web_fetch: no host in {url}")
    try:
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError as exc:
        raise Refused(f"web_fetch: bad port in {url}") from exc
    addresses = await _resolve(host, port)
    if host not in allow_hosts:
        for address in addresses:
            reason = non_public_reason(address)
            if reason:
                raise Refused(
                    f"web_fetch refused {url}: {host} resolves to {address}, a {reason} address "
                    "(not on the public internet). Allow the host in the web_fetch.allow_hosts setting "
                    "if it is meant to be reached."
                )
    return Hop(url, host, port, tuple(addresses))


async def _resolve(host: str, port: int) -> list[str]:
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ToolInputError(f"web_fetch: cannot resolve {host}: {exc.strerror}") from exc
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    if not addresses:
        raise ToolInputError(f"web_fetch: {host} has no address")
    return addresses


def non_public_reason(address: str) -> str | None:
    """Why `address` is not on the public internet, or None when it is."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        # An IPv4 address inside (mapped, NAT64, 6to4 `2002:V4::`) is judged as that address.
        embedded = ip.ipv4_mapped or ip.sixtofour or (
            ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF) if ip in _NAT64 else None)
        if embedded is not None:
            return non_public_reason(str(embedded))
    for label, test in _CLASSES:
        if test(ip):
            return label
    return None


def _in_blocked(ip: Any) -> bool:
    return any(ip.version == net.version and ip in net for net in _BLOCKED_NETWORKS)


_CLASSES = (
    ("loopback", lambda ip: ip.is_loopback),
    ("unspecified", lambda ip: ip.is_unspecified),
    ("link-local", lambda ip: ip.is_link_local),
    ("multicast", lambda ip: ip.is_multicast),
    ("private", lambda ip: ip.is_private),
    ("reserved", lambda ip: ip.is_reserved),
    ("carrier-grade NAT", lambda ip: ip.version == 4 and ip in _CGNAT),
    ("non-public", lambda ip: _in_blocked(ip) or not ip.is_global),
)


def pinned_url(hop: Hop, address: str) -> str:
    """The hop's URL with the host replaced by a checked address."""
    parts = urlsplit(hop.url)
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    literal = f"[{ip}]" if ip.version == 6 else str(ip)
    netloc = f"{literal}:{hop.port}"
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))


def _hop_headers(hop: Hop, headers: dict[str, str]) -> dict[str, str]:
    default_port = 443 if urlsplit(hop.url).scheme.lower() == "https" else 80
    host = f"[{hop.host}]" if ":" in hop.host else hop.host
    return {**headers, "Host": host if hop.port == default_port else f"{host}:{hop.port}"}


async def _read_capped(response: httpx.Response) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size >= MAX_BYTES:
            return b"".join(chunks)[:MAX_BYTES], True
    return b"".join(chunks), False


def _to_result(requested: str, url: str, response: httpx.Response, body: bytes,
               truncated: bool) -> ToolResult | Image | str:
    mime = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if mime in _IMAGE_TYPES and response.is_success and not truncated:
        return Image(body, mime)
    text = _decode(body, response, mime)
    if not response.is_success:
        return ToolResult.error(f"HTTP {response.status_code} {response.reason_phrase} from {url}\n\n{text}".rstrip())
    parts = [f"(redirected to {url})"] if url != requested else []
    parts.append(text)
    if truncated:
        parts.append(f"(only the first {MAX_BYTES} bytes of the response were read)")
    return "\n\n".join(parts)


def _decode(body: bytes, response: httpx.Response, mime: str) -> str:
    if b"\0" in body[:8192] and not mime.startswith("text/"):
        return f"(binary content, {mime or 'unknown type'}, {len(body)} bytes, not shown)"
    text = body.decode(response.charset_encoding or "utf-8", errors="replace")
    if mime in _HTML_TYPES or (not mime and text.lstrip()[:15].lower().startswith(("<!doctype html", "<html"))):
        return html_to_markdown(text)
    return text


def html_to_markdown(html: str) -> str:
    # Imported here: the HTML parsers cost a first `tools --help` a few hundred ms for nothing.
    from bs4 import BeautifulSoup
    from markdownify import MarkdownConverter

    soup = BeautifulSoup(html, "html.parser")
    # markdownify keeps the text of tags it strips; code and styles are not page text
    for element in soup(["script", "style", "noscript", "template", "head"]):
        element.decompose()
    markdown = MarkdownConverter(heading_style="ATX").convert_soup(soup)
    lines = [line.rstrip() for line in markdown.splitlines()]
    return "\n".join(_squeeze_blank_lines(lines)).strip() + "\n"


def _squeeze_blank_lines(lines: Iterable[str]) -> Iterable[str]:
    blank = False
    for line in lines:
        if line or not blank:
            yield line
        blank = not line
