"""A small made-up "github" MCP server that ships with toolkernel.

Run it with `python -m toolkernel.demo_server` (stdio),
`python -m toolkernel.demo_server --http PORT` (streamable HTTP on
127.0.0.1:PORT/mcp) or `--sse PORT` (the older SSE transport, at /sse). Its data is invented and fixed, so notebooks and tests that use it
print the same thing every time. The seed's example script works against it:

    tools github list-pulls '{"repo":"acme/api","state":"open"}' \\
      | jq -r '.[] | select(.draft | not) | .number' \\
      | while read n; do
          tools github get-pull "repo=acme/api" "number=$n" | jq -c '{number, title, mergeable}'
        done
"""

from __future__ import annotations

import argparse
import itertools
from typing import Any, Literal

from ._mcp_sdk import MCPServer, ToolError, run_server, types

PULLS: dict[str, list[dict[str, Any]]] = {
    "acme/api": [
        {"number": 101, "title": "Add rate limiting to /search", "state": "open", "draft": False,
         "author": "mira", "mergeable": True},
        {"number": 102, "title": "WIP: move auth to middleware", "state": "open", "draft": True,
         "author": "tomas", "mergeable": False},
        {"number": 103, "title": "Fix pagination off-by-one", "state": "open", "draft": False,
         "author": "ana", "mergeable": False},
        {"number": 104, "title": "Bump httpx to 0.27", "state": "open", "draft": False,
         "author": "dependabot", "mergeable": True},
        {"number": 97, "title": "Drop Python 3.9", "state": "closed", "draft": False,
         "author": "mira", "mergeable": None},
        {"number": 95, "title": "Document the retry policy", "state": "closed", "draft": False,
         "author": "lee", "mergeable": None},
    ],
    "acme/web": [
        {"number": 12, "title": "Dark mode", "state": "open", "draft": False,
         "author": "ana", "mergeable": True},
        {"number": 11, "title": "Try the new router", "state": "open", "draft": True,
         "author": "lee", "mergeable": True},
    ],
}

BRANCHES = {"main", "fix-x", "feature/search-limits", "wip-auth"}

READ_ONLY = types.ToolAnnotations(readOnlyHint=True, destructiveHint=False, openWorldHint=False)
DESTRUCTIVE = types.ToolAnnotations(readOnlyHint=False, destructiveHint=True)

State = Literal["open", "closed", "all"]


def _pulls_of(repo: str) -> list[dict[str, Any]]:
    if repo not in PULLS:
        raise ToolError(f"repository not found: {repo} (known: {', '.join(sorted(PULLS))})")
    return PULLS[repo]


def list_pulls(repo: str, state: State = "open") -> list[dict[str, Any]]:
    """List the pull requests of a repository: number, title, draft, author."""
    return [
        {key: pull[key] for key in ("number", "title", "draft", "author", "state")}
        for pull in _pulls_of(repo)
        if state == "all" or pull["state"] == state
    ]


def get_pull(repo: str, number: int) -> dict[str, Any]:
    """Get one pull request: number, title, state, draft, author, mergeable."""
    for pull in _pulls_of(repo):
        if pull["number"] == number:
            return dict(pull)
    raise ToolError(f"pull request #{number} not found in {repo}")


def build_server() -> MCPServer:
    """The demo server with its four tools; issue numbers count up from 1201 per process."""
    server = MCPServer("github", instructions="A made-up GitHub with fixed data, for demos and tests.")
    issue_numbers = itertools.count(1201)

    server.tool(annotations=READ_ONLY)(list_pulls)
    server.tool(annotations=READ_ONLY)(get_pull)

    @server.tool()
    def create_issue(title: str, body: str = "") -> dict[str, Any]:
        """Create an issue (made up: nothing is stored) and return its id and number."""
        number = next(issue_numbers)
        return {"id": f"ACME-{number}", "number": number, "title": title}

    @server.tool(annotations=DESTRUCTIVE)
    def delete_branch(branch: str) -> str:
        """Delete a branch (made up: nothing is deleted)."""
        if branch == "main":
            raise ToolError("refusing to delete the default branch")
        if branch not in BRANCHES:
            raise ToolError(f"branch not found: {branch}")
        return f"deleted branch {branch}"

    return server


def main(argv: list[str] | None = None, server: MCPServer | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    transport = parser.add_mutually_exclusive_group()
    transport.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT/mcp")
    transport.add_argument("--sse", type=int, metavar="PORT", help="serve the older SSE transport on 127.0.0.1:PORT/sse")
    args = parser.parse_args(argv)
    server = server or build_server()
    if args.http is not None:
        run_server(server, "streamable-http", port=args.http)
    elif args.sse is not None:
        run_server(server, "sse", port=args.sse)
    else:
        run_server(server)


if __name__ == "__main__":
    main()
