"""A Jupyter Server behind JupyterHub: a user's server at `/user/NAME/` on the hub's proxy.

Reading, editing and running go through it as through any Jupyter Server; only the hub's
refusals need words a person can act on. The hub and the user's server name themselves in
every answer (`X-JupyterHub-Version`). A token the user's server refuses is shown to the hub
(`/hub/api/user`, which any valid token may read) to tell a token the hub does not know from one
that lacks the `access:servers` scope for this server. A user's server that is not running
leaves its URL to the hub, which answers with a redirect to its own pages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx

from ..._errors import CallError, InvalidInput, Unavailable, printable

HUB_HEADER = "x-jupyterhub-version"
_USER_SERVER = re.compile(r"(?P<prefix>.*/)user/(?P<user>[^/]+)/(?:(?P<name>[^/]+)/)?")
_HUB_PAGES = re.compile(r"(?P<prefix>.*/)hub(/.*)?")
# Each front end names the option its own way: `serve`'s own --token is its bearer token.
GIVE_TOKEN = "`%tools pair ... --token`, `toolkernel serve ... --server-token`"


@dataclass(frozen=True)
class UserServer:
    hub: str  # the hub's public URL, with its prefix: http://host/ or http://host/jupyter/
    user: str
    name: str  # "" for the user's default server

    @property
    def scope(self) -> str:
        return f"access:servers!server={self.user}/{self.name}"


def user_server(base: str) -> UserServer | None:
    scheme, netloc, path, _, _ = urlsplit(base)
    found = _USER_SERVER.fullmatch(path if path.endswith("/") else path + "/")
    if found is None:
        return None
    hub = urlunsplit((scheme, netloc, found["prefix"], "", ""))
    return UserServer(hub, printable(unquote(found["user"])), printable(unquote(found["name"] or "")))


def _hub_url(base: str) -> str:
    """The hub's URL for a base that is not a user's server (the hub itself, or its /hub/ pages)."""
    scheme, netloc, path, _, _ = urlsplit(base)
    found = _HUB_PAGES.fullmatch(path)
    return urlunsplit((scheme, netloc, found["prefix"] if found else path or "/", "", ""))


def is_hub(response: httpx.Response) -> bool:
    return HUB_HEADER in response.headers


async def refusal(http: httpx.AsyncClient, base: str, response: httpx.Response) -> str | None:
    """Why a user's server on JupyterHub refused the token (None when the answer is not the hub's)."""
    server = user_server(base)
    if server is None or not is_hub(response):
        return None
    owner = await _token_owner(http, server.hub)
    make = (f"make one with the `{server.scope}` scope ({server.hub}hub/token, or the hub's REST API) and give it "
            f"({GIVE_TOKEN})")
    if owner is None:
        return (f"the JupyterHub at {server.hub} does not accept the token (HTTP {response.status_code} from the "
                f"server of {server.user}): it is unknown, expired or revoked; {make}")
    listed = owner.get("scopes")
    scopes = ", ".join(printable(str(s)) for s in (listed if isinstance(listed, list) else [])) or "none"
    holder = f"{printable(str(owner.get('kind') or 'user'))[:20]} {printable(str(owner.get('name') or '?'))[:100]}"
    return (f"the JupyterHub at {server.hub} refused the token at the server of {server.user} "
            f"(HTTP {response.status_code}): the token (of {holder}) lacks the `access:servers` scope for that "
            f"server, `{server.scope}` (its scopes: {scopes[:500]}); {make}")


async def _token_owner(http: httpx.AsyncClient, hub: str) -> dict | None:
    """Who the hub says the token belongs to, with the token's scopes; None when it refuses the token."""
    try:
        response = await http.get(hub + "hub/api/user")
        owner = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return owner if isinstance(owner, dict) else None


def redirected(base: str, where: str, response: httpx.Response) -> CallError:
    """An API request answered with a redirect: a user's server on JupyterHub that is not running, a
    hub's own URL given for a user's server, or a URL that is not a Jupyter Server's API."""
    location = printable(response.headers.get("location", "")[:300])
    server = user_server(base)
    if is_hub(response) and server is not None:
        return Unavailable(f"the server of {server.user} on the JupyterHub at {server.hub} is not running (the hub "
                           f"answered {where} in its place); start it ({server.hub}hub/home) and call again",
                           retryable=True)
    if is_hub(response):
        return InvalidInput(f"{base} is a JupyterHub, not a user's Jupyter Server: give the URL of the user's "
                            f"server, {_hub_url(base)}user/NAME/")
    return InvalidInput(f"the Jupyter Server at {base} answered {where} with a redirect (HTTP "
                        f"{response.status_code}) to {location or 'nowhere'}, not with its API: give the URL of the "
                        f"server itself")
