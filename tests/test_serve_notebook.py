"""`toolkernel serve --notebook PATH --kernel NAME`: the notebook tools, directly, on one notebook.

Real processes: each `toolkernel serve` starts its own kernel through
jupyter_client; the client is the `mcp` SDK's over stdio. Two serve sessions
on two notebooks at once must never reach each other's kernel or file
(issue 16 item 4), and the cells they run are an agent's (hostbash, issue 13).
"""

from __future__ import annotations

import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import nbformat
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from approval_helpers import policy_section
from test_serve import WAIT, project, run, server_env

POLICY = policy_section(allow=["notebook_run", "notebook_edit", "notebook_read", "Bash(echo *)"],
                        deny=["Bash(rm *)"])


@asynccontextmanager
async def serving(work: Path, *options: str):
    params = StdioServerParameters(command=sys.executable, args=["-m", "toolkernel", "serve", *options],
                                   env=server_env(), cwd=str(work))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as client:
            await client.initialize()
            yield client


def new_notebook(path: Path) -> None:
    nbformat.write(nbformat.v4.new_notebook(), path)


async def run_code(client: ClientSession, notebook: str, code: str):
    return await client.call_tool("notebook_run", {"notebook_path": notebook, "code": code})


def text(result) -> str:
    return "".join(c.text for c in result.content if c.type == "text")


def test_two_serve_sessions_on_two_notebooks_never_cross_talk(tmp_path):
    work = project(tmp_path, POLICY)
    for name in ("a.ipynb", "b.ipynb"):
        new_notebook(work / name)
    seen: dict[str, dict] = {"a": {}, "b": {}}

    async def agent(name: str, other: str) -> None:
        notebook = f"{name}.ipynb"
        async with serving(work, "--notebook", notebook, "--kernel", "python3") as client:
            got = seen[name]
            got["listed"] = [t.name for t in (await client.list_tools()).tools]
            await run_code(client, notebook, f"who = {name!r}; import os; pid = os.getpid()")
            await client.call_tool("notebook_read", {"notebook_path": notebook})
            got["edit"] = await client.call_tool("notebook_edit", {
                "notebook_path": notebook, "edit_mode": "insert", "cell_type": "code",
                "new_source": f"print('cell of {name}')"})
            await anyio.sleep(1)  # let the other agent's run and edit land in between
            got["who"] = text(await run_code(client, notebook, "print(who, pid)"))
            got["other"] = await run_code(client, f"{other}.ipynb", "print(who)")

    async def body():
        async with anyio.create_task_group() as group:
            group.start_soon(agent, "a", "b")
            group.start_soon(agent, "b", "a")

    run(body)
    for name, other in (("a", "b"), ("b", "a")):
        got = seen[name]
        assert {"bash", "notebook_read", "notebook_edit", "notebook_run"} <= set(got["listed"])
        assert got["who"].split()[0] == name
        assert got["other"].is_error and "not paired" in text(got["other"])  # the other notebook: unreachable
        sources = [c.source for c in nbformat.read(work / f"{name}.ipynb", as_version=4).cells]
        assert sources == [f"print('cell of {name}')"], text(got["edit"])
    assert seen["a"]["who"].split()[1] != seen["b"]["who"].split()[1]  # two kernels


def test_cells_run_through_serve_are_an_agents(tmp_path):
    work = project(tmp_path, POLICY)
    new_notebook(work / "nb.ipynb")
    (work / "keep.txt").write_text("x")

    async def body():
        async with serving(work, "--notebook", "nb.ipynb", "--kernel", "python3") as client:
            await run_code(client, "nb.ipynb", "%load_ext toolkernel")
            echoed = await run_code(client, "nb.ipynb", "%%bash\necho from-agent")
            removed = await run_code(client, "nb.ipynb", "%%bash\nrm -f keep.txt")
            touched = await run_code(client, "nb.ipynb", "%%bash\ntouch made.txt")
            return echoed, removed, touched

    echoed, removed, touched = run(body)
    assert "from-agent" in text(echoed)
    assert "denied" in text(removed) and (work / "keep.txt").exists()  # Bash(rm *) holds for an agent's cell
    assert "needs_approval" in text(touched) and not (work / "made.txt").exists()  # asked, not run


def test_notebook_options_without_a_notebook_or_a_kernel_are_one_line_errors(tmp_path):
    work = project(tmp_path, "")
    for options in (["--kernel", "python3"], ["--notebook", "nb.ipynb"],
                    ["--notebook", "nb.ipynb", "--kernel", "no-such-kernel-xyz"]):
        done = subprocess.run([sys.executable, "-m", "toolkernel", "serve", *options], cwd=work, env=server_env(),
                              capture_output=True, text=True, timeout=WAIT, stdin=subprocess.DEVNULL)
        assert done.returncode == 2, (options, done.stderr)
        assert done.stderr.startswith("toolkernel serve: ") and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) <= 12  # the pairing usage may follow its one line

