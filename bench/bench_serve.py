"""Benchmark: the tool list an MCP client receives from `toolkernel serve`, Tools in Shell on and off.

    python bench/bench_serve.py [--skip-real]

Two configurations:
1. "six real servers" (see shared notes): npm @modelcontextprotocol/server-everything,
   server-filesystem, server-memory; PyPI mcp-server-time, mcp-server-fetch, mcp-server-git.
   They are installed into this run's own temporary folder (npm install; a venv for the
   PyPI ones); without network the part is skipped with a message.
2. "small": one fixture server of five tools (tests/servers/recorder.py).

For each, the list as `tools/list` returns it (JSON of each tool, as the SDK serializes
it), with `[tools_in_shell] enabled = true` and `false`: bytes, and tokens as bytes/4 (no
tokenizer here works offline). Model turns of a task of 10 tool calls whose inputs do not
depend on each other: direct, one turn per call (a client that makes parallel calls needs
fewer); Tools in Shell, one turn for `tools SERVER --help` and one for the script. The bash
call is run for real here, with 10 calls in one script, to show that one call does it.
"""

from __future__ import annotations

import argparse
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


def listed(workdir: Path, enabled: bool, extra: str) -> list[dict]:
    (workdir / "toolkernel.toml").write_text(extra + f"\n[tools_in_shell]\nenabled = {str(enabled).lower()}\n")
    server = ToolServer(workdir)
    try:
        return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in server.listed_tools()]
    finally:
        server.close()


def measure(name: str, workdir: Path, servers: str) -> dict:
    on, off = listed(workdir, True, servers), listed(workdir, False, servers)
    size_on, size_off = len(json.dumps(on).encode()), len(json.dumps(off).encode())
    return {"config": name, "tools_off": len(off), "bytes_off": size_off, "tokens_off": size_off // 4,
            "tools_on": len(on), "bytes_on": size_on, "tokens_on": size_on // 4,
            "ratio": size_on / size_off, "turns_off": TASK_CALLS, "turns_on": 2}


def toml_server(name: str, command: str, args: list[str]) -> str:
    return f"[mcp_servers.{name}]\ncommand = {json.dumps(command)}\nargs = {json.dumps(args)}\n"


def install_real(folder: Path) -> str | None:
    """The six servers' config, or None (with a message) when they cannot be installed."""
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
    lines = ["| configuration | tools (direct) | list bytes direct | list bytes TiS | ~tokens direct | ~tokens TiS "
             "| TiS / direct | turns for 10 calls direct / TiS |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['config']} | {r['tools_off']} | {r['bytes_off']:,} | {r['bytes_on']:,} | "
                     f"{r['tokens_off']:,} | {r['tokens_on']:,} | {r['ratio']:.1%} | {r['turns_off']} / {r['turns_on']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-real", action="store_true", help="only the small configuration")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="toolkernel-bench-serve-") as tmp:
        small = toml_server("github", sys.executable, [str(REPO / "tests" / "servers" / "recorder.py")])
        work = Path(tmp) / "small"
        work.mkdir()
        rows.append(measure("small: 1 server, 5 tools (+7 built-in)", work, small))
        ran = script_of_ten(work, small)
        print(f"one bash call made {ran} of {TASK_CALLS} calls", file=sys.stderr)
        if not args.skip_real:
            servers = install_real(Path(tmp) / "real")
            if servers is not None:
                work = Path(tmp) / "six"
                work.mkdir()
                rows.append(measure("six real servers (+7 built-in)", work, servers))
    print(table(rows))


if __name__ == "__main__":
    main()
