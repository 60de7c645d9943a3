"""The same notebook task through toolkernel and through jupyter-mcp-server, against one JupyterLab
with jupyter-collaboration: read the notebook, change one cell, run it, read its output.

    python bench/bench_notebook_mcp.py --jupyter-mcp-server /path/to/bin/jupyter-mcp-server [--rounds 3]

jupyter-mcp-server (PyPI) pins its own MCP SDK, so install it in a venv of its own and give its
executable; this script runs in a venv with toolkernel's dependencies, jupyterlab and
jupyter-collaboration. Figures: bytes of the tool list the agent receives (JSON of name,
description and input schema), tool calls for the task, and wall time (setup: pairing the
notebook / starting and initialising the MCP server; task: the calls). Each side starts its own
kernel; the sides alternate, each round on a fresh copy of the notebook.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_notebook import TOKEN, _free_port, _wait_for  # noqa: E402

from toolkernel._providers._notebook import notebook_tools, pair, unpair  # noqa: E402
from toolkernel._tool import ToolContext  # noqa: E402

NEW_SOURCE = "print(sum(range(10)))"
EXPECTED = "45"


def task_notebook(path: Path) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Task"),
                                         nbformat.v4.new_code_cell("print('old')")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def toolkernel_list_bytes() -> int:
    tools = [{"name": t.name, "description": t.description, "inputSchema": t.input_schema} for t in notebook_tools()]
    return len(json.dumps(tools).encode())


async def toolkernel_round(url: str, workdir: Path, name: str) -> tuple[float, float, int]:
    read, edit, run_tool = notebook_tools()
    ctx = ToolContext(workdir, state={})
    start = time.perf_counter()
    await pair(ctx.state, workdir, name, server=url, token=TOKEN, kernel="python3")
    setup = time.perf_counter() - start
    try:
        start = time.perf_counter()
        text = (await read.call({"notebook_path": name}, ctx)).texts[0]
        cell_id = [line.split("id=")[1].split()[0] for line in text.splitlines() if line.startswith("--- cell 2/")][0]
        await edit.call({"notebook_path": name, "cell_id": cell_id, "new_source": NEW_SOURCE}, ctx)
        result = await run_tool.call({"notebook_path": name, "cell_id": cell_id}, ctx)
        task = time.perf_counter() - start
        assert result.texts[0].startswith(EXPECTED), result.texts
    finally:
        await unpair(ctx.state)
    return setup, task, 3


async def jms_round(executable: str, url: str, name: str) -> tuple[float, float, int, int]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=executable, args=[
        "start", "--transport", "stdio", "--jupyter-url", url, "--jupyter-token", TOKEN, "--document-id", name])
    start = time.perf_counter()
    async with stdio_client(params) as (reader, writer), ClientSession(reader, writer) as session:
        await session.initialize()
        listed = await session.list_tools()
        setup = time.perf_counter() - start
        list_bytes = len(json.dumps([{"name": t.name, "description": t.description, "inputSchema": t.input_schema}
                                     for t in listed.tools]).encode())
        start = time.perf_counter()
        calls = [("use_notebook", {"notebook_name": "task", "notebook_path": name}),
                 ("read_notebook", {"notebook_name": "task", "response_format": "detailed"}),
                 ("overwrite_cell_source", {"cell_index": 1, "cell_source": NEW_SOURCE}),
                 ("execute_cell", {"cell_index": 1})]
        result = None
        for tool, arguments in calls:
            result = await session.call_tool(tool, arguments)
        task = time.perf_counter() - start
        shown = json.dumps(result.model_dump(mode="json"))
        assert EXPECTED in shown, shown[:500]
    return setup, task, len(calls), list_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jupyter-mcp-server", required=True, help="the jupyter-mcp-server executable")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        port = _free_port()
        url = f"http://127.0.0.1:{port}/"
        env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(root / ".runtime"))
        lab = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", f"--ServerApp.port={port}",
             "--ServerApp.ip=127.0.0.1", "--ServerApp.port_retries=0", f"--IdentityProvider.token={TOKEN}",
             f"--ServerApp.root_dir={root}"], env=env, stdout=(root / "lab.log").open("wb"), stderr=subprocess.STDOUT,
            cwd=root)  # the collaboration store writes its database where the server runs
        try:
            _wait_for(url)
            ours, theirs = [], []
            for n in range(args.rounds):
                task_notebook(root / f"tk{n}.ipynb")
                task_notebook(root / f"jms{n}.ipynb")
                ours.append(asyncio.run(toolkernel_round(url, root, f"tk{n}.ipynb")))
                theirs.append(asyncio.run(jms_round(args.jupyter_mcp_server, url.rstrip("/"), f"jms{n}.ipynb")))
        finally:
            lab.terminate()
            lab.wait(timeout=60)
    report(ours, theirs)


def report(ours: list[tuple], theirs: list[tuple]) -> None:
    def med(rows: list[tuple], i: int) -> float:
        return statistics.median(row[i] for row in rows)

    print(f"read, change one cell, run it, read its output; median of {len(ours)} rounds")
    print(f"{'':<20} {'list bytes':>10} {'calls':>6} {'setup s':>8} {'task s':>7}")
    print(f"{'toolkernel':<20} {toolkernel_list_bytes():>10} {ours[0][2]:>6} {med(ours, 0):8.2f} {med(ours, 1):7.2f}")
    print(f"{'jupyter-mcp-server':<20} {theirs[0][3]:>10} {theirs[0][2]:>6} {med(theirs, 0):8.2f} "
          f"{med(theirs, 1):7.2f}")
    print(f"task time ratio toolkernel / jupyter-mcp-server: {med(ours, 1) / med(theirs, 1):.2f}")


if __name__ == "__main__":
    main()
