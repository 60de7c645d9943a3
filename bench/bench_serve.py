"""Benchmark: the tool list an MCP client receives from `toolkernel serve`, Tools in Shell on and off.

    python bench/bench_serve.py [--skip-real]

Two configurations:
1. "six real servers" (see shared notes): npm @modelcontextprotocol/server-everything,
   server-filesystem, server-memory; PyPI mcp-server-time, mcp-server-fetch, mcp-server-git.
   They are installed into this run's own temporary folder (npm install; a venv for the
   PyPI ones); without network the part is skipped with a message.
2. "small": one fixture server of five tools (tests/servers/recorder.py).

For each, the list as `tools/list` returns it (JSON of each tool, as the SDK serializes
it), with `[tools_in_shell] enabled = true` and `false`, and, for reference, the lists the
configured servers themselves send a client that connects to each directly (every field:
title, annotations, outputSchema, execution). Bytes, and tokens: o200k_base through
`bpe-openai` (a tokenizer that ships its tables, `pip install bpe-openai`) when it is
installed, else bytes/4. The Tools-in-Shell list is also split into its parts, to show its
floor. Model turns of a task of 10 tool calls whose inputs do not
depend on each other: direct, one turn per call (a client that makes parallel calls needs
fewer); Tools in Shell, one turn for `tools SERVER --help` and one for the script. The bash
call is run for real here, with 10 calls in one script, to show that one call does it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TOOLKERNEL_TRUST_ALL", "1")  # the bench writes its own configs

from toolkernel._frontends._serve import ToolServer  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
NPM = ["@modelcontextprotocol/server-everything", "@modelcontextprotocol/server-filesystem",
       "@modelcontextprotocol/server-memory"]
PYPI = ["mcp-server-time", "mcp-server-fetch", "mcp-server-git"]
TASK_CALLS = 10


def tokens_of(text: str) -> tuple[int, str]:
    """Tokens of `text`, and how they were counted."""
    try:
        import bpe_openai
    except ImportError:
        return len(text.encode()) // 4, "bytes/4"
    return len(bpe_openai.get_encoding("o200k_base").encode(text)), "o200k_base"


def listed(workdir: Path, enabled: bool, extra: str) -> list[dict]:
    (workdir / "toolkernel.toml").write_text(extra + f"\n[tools_in_shell]\nenabled = {str(enabled).lower()}\n")
    server = ToolServer(workdir)
    try:
        return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in server.listed_tools()]
    finally:
        server.close()


def servers_own(workdir: Path) -> list[dict]:
    """Every configured server's tools as the server lists them to a client of its own."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from toolkernel._config._config import load_config

    async def one(cfg) -> list[dict]:
        params = StdioServerParameters(command=cfg.command, args=list(cfg.args), env=dict(cfg.env) or None)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            return [t.model_dump(mode="json", by_alias=True, exclude_none=True)
                    for t in (await client.list_tools()).tools]

    async def every() -> list[dict]:
        return [t for cfg in load_config(workdir).servers.values() for t in await one(cfg)]

    return asyncio.run(every())


def size(tools: list[dict]) -> tuple[int, int]:
    text = json.dumps(tools)
    return len(text.encode()), tokens_of(text)[0]


def measure(name: str, workdir: Path, servers: str) -> dict:
    on, off = listed(workdir, True, servers), listed(workdir, False, servers)
    (bytes_on, tokens_on), (bytes_off, tokens_off) = size(on), size(off)
    own = servers_own(workdir)
    bytes_own, tokens_own = size(own)
    parts = {t["name"]: len(json.dumps(t).encode()) for t in on}
    return {"config": name, "tools_off": len(off), "bytes_off": bytes_off, "tokens_off": tokens_off,
            "tools_on": len(on), "bytes_on": bytes_on, "tokens_on": tokens_on,
            "tools_own": len(own), "bytes_own": bytes_own, "tokens_own": tokens_own,
            "ratio": bytes_on / bytes_off, "ratio_own": bytes_on / bytes_own, "parts": parts,
            "turns_off": TASK_CALLS, "turns_on": 2}


def toml_server(name: str, command: str, args: list[str]) -> str:
    return f"[mcp_servers.{name}]\ncommand = {json.dumps(command)}\nargs = {json.dumps(args)}\n"


def install_real(folder: Path, installed: Path | None) -> str | None:
    """The six servers' config, or None (with a message) when they cannot be installed.
    `installed`: a folder where an earlier run (or a person) installed them already."""
    if installed is not None:
        return servers_config(installed)
    if shutil.which("npm") is None:
        print("skipping the six real servers: npm is not installed", file=sys.stderr)
        return None
    try:
        subprocess.run(["npm", "install", "--silent", "--prefix", str(folder), *NPM], check=True,
                       capture_output=True, timeout=600)
        venv = folder / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *PYPI], check=True,
                       capture_output=True, timeout=900)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        print(f"skipping the six real servers: installing them failed (offline?): {exc}", file=sys.stderr)
        return None
    repo = folder / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return servers_config(folder)


def servers_config(folder: Path) -> str:
    repo = folder / "repo"
    bin_ = folder / "node_modules" / ".bin"
    return "".join([
        toml_server("everything", str(bin_ / "mcp-server-everything"), []),
        toml_server("filesystem", str(bin_ / "mcp-server-filesystem"), [str(folder)]),
        toml_server("memory", str(bin_ / "mcp-server-memory"), []),
        toml_server("time", str(folder / "venv" / "bin" / "mcp-server-time"), []),
        toml_server("fetch", str(folder / "venv" / "bin" / "mcp-server-fetch"), []),
        toml_server("git", str(folder / "venv" / "bin" / "mcp-server-git"), ["--repository", str(repo)]),
    ])


def script_of_ten(workdir: Path, servers: str) -> int:
    """Run the 10-call task as one `bash` call; returns the calls the report or output shows."""
    (workdir / "toolkernel.toml").write_text(servers)
    server = ToolServer(workdir)
    from toolkernel._approval._approver import stop_and_report

    try:
        script = f"for i in $(seq 1 {TASK_CALLS}); do tools github list_pulls repo=r$i | jq -r '.[0].repo'; done"
        result = server.run_bash("bench", script, stop_and_report)
        return len(result.structured_content["stdout"].split())
    finally:
        server.close()


def table(rows: list[dict]) -> str:
    counted = tokens_of("")[1]
    lines = [f"| configuration | tools direct | bytes (tokens, {counted}) direct | bytes (tokens) TiS | TiS / direct "
             "| servers' own lists: tools, bytes (tokens) | TiS / servers' own | turns for 10 calls direct / TiS |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['config']} | {r['tools_off']} | {r['bytes_off']:,} ({r['tokens_off']:,}) | "
                     f"{r['bytes_on']:,} ({r['tokens_on']:,}) | {r['ratio']:.1%} | "
                     f"{r['tools_own']}, {r['bytes_own']:,} ({r['tokens_own']:,}) | {r['ratio_own']:.1%} | "
                     f"{r['turns_off']} / {r['turns_on']} |")
    parts = ", ".join(f"{name} {n:,} B" for name, n in rows[0]["parts"].items())
    lines.append(f"\nThe Tools-in-Shell list, tool by tool (JSON of each): {parts}.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-real", action="store_true", help="only the small configuration")
    parser.add_argument("--installed", type=Path, help="the six servers as installed by an earlier run into this folder"
                        " (node_modules/, venv/, repo/)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="toolkernel-bench-serve-") as tmp:
        small = toml_server("github", sys.executable, [str(REPO / "tests" / "servers" / "recorder.py")])
        work = Path(tmp) / "small"
        work.mkdir()
        rows.append(measure("small: 1 server, 5 tools (+9 built-in)", work, small))
        ran = script_of_ten(work, small)
        print(f"one bash call made {ran} of {TASK_CALLS} calls", file=sys.stderr)
        if not args.skip_real:
            servers = install_real(Path(tmp) / "real", args.installed)
            if servers is not None:
                work = Path(tmp) / "six"
                work.mkdir()
                rows.append(measure("six real servers (+9 built-in)", work, servers))
    print(table(rows))


if __name__ == "__main__":
    main()
