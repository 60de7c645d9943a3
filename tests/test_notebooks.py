"""The demo notebooks run top to bottom headless (no network, no account) with the
folder's own toolkernel.toml. Their questions are answered as JupyterLab's buttons
answer them, from each cell's metadata (`toolkernel._frontends._demo.AnsweringClient`).
Each runs once per module (a run is a kernel, the demo server and, for data-science, pandas and
matplotlib); that runs give the same outputs apart from the fields declared volatile below is
tested where three runners run each demo (test_demo_runners.py)."""

from __future__ import annotations

import copy
import os
import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest

from toolkernel._frontends._demo import AnsweringClient

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = ["quickstart", "approvals", "data-science", "agent-notebook-editing"]

# Volatile: what differs between two runs by design.
VOLATILE_PATTERNS = [
    (re.compile(r"\d{8}-\d{6}-\d+"), "<stamp>"),  # tool-images/<label>-<date>-<time>-<n>.png
    (re.compile(r"\b\d{2}:\d{2}:\d{2}\b"), "<time>"),
    (re.compile(r"0x[0-9a-f]{6,}"), "<address>"),  # reprs like <Figure at 0x7f...>
    (re.compile(r"pid \d+|kernel-[0-9a-f-]{36}"), "<kernel>"),
    (re.compile(r"\b[0-9a-f]{8}\b"), "<new-cell-id>"),  # notebook-edit gives an inserted cell a random id
]
VOLATILE_MIME = ("image/png",)  # rendered bytes may differ in compression metadata


def _folder_at(base: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    copied = base / "notebooks"
    shutil.copytree(REPO / "notebooks", copied)
    # The folder's config starts the kernel's own Python (${TOOLKERNEL_PYTHON}), not the first
    # `python3` on the PATH: here that one is from another environment, without toolkernel.
    other = base / "other-env" / "bin"
    other.mkdir(parents=True)
    (other / "python3").write_text("#!/bin/sh\necho \"No module named 'toolkernel'\" >&2\nexit 1\n")
    (other / "python3").chmod(0o755)
    monkeypatch.setenv("PATH", f"{other}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(base / "xdg"))
    monkeypatch.setenv("TOOLKERNEL_ADMIN_CONFIG", str(base / "no-admin.toml"))
    return copied


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """Each demo run once, in a fresh copy of the folder of its own: name -> (folder, notebook)."""
    done = {}
    with pytest.MonkeyPatch.context() as monkeypatch:
        for name in NOTEBOOKS:
            copied = _folder_at(tmp_path_factory.mktemp(name), monkeypatch)
            done[name] = copied, execute(copied / f"{name}.ipynb")
    return done


def execute(path: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=4)
    client = AnsweringClient(nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    assert client.unanswered == [], f"questions the notebook's metadata gives no answer for: {client.unanswered}"
    return nb


def errors_of(nb: nbformat.NotebookNode) -> list:
    """The errors of cells not tagged to raise one (nbclient, and Run All, stop at those)."""
    return [o for c in nb.cells if c.cell_type == "code" and "raises-exception" not in c.metadata.get("tags", [])
            for o in c.outputs if o.output_type == "error"]


def comparable(nb: nbformat.NotebookNode) -> list:
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cells.append([_output(out) for out in _joined_streams(cell.outputs)])
    return cells


def _joined_streams(outputs: list) -> list:
    """Adjacent stream outputs as one entry per stream name, as a notebook shows them: where
    the kernel's stdout buffer happens to flush differs between runs, and so does the order of
    stdout against stderr. A script's two streams reach the cell through two pipes read apart
    (Bashkit's, as a real program's), so each keeps its own order and only that is compared."""
    joined: list = []
    for out in map(copy.deepcopy, outputs):
        last = joined[-1] if joined else None
        if out.output_type != "stream":
            joined.append(out)
        elif last is not None and last.get("output_type") == "streams":
            last["text"][out.name] = last["text"].get(out.name, "") + out.text
        else:
            joined.append({"output_type": "streams", "text": {out.name: out.text}})
    return joined


def _output(out: dict) -> dict:
    out.pop("metadata", None)
    out.pop("execution_count", None)
    if out.get("output_type") == "streams":
        out["text"] = {name: _stable(text) for name, text in out["text"].items()}
    elif "text" in out:
        out["text"] = _stable(out["text"])
    for mime, value in out.get("data", {}).items():
        out["data"][mime] = "<volatile>" if mime in VOLATILE_MIME else _stable(value) if isinstance(value, str) else value
    return out


def _stable(text: str) -> str:
    for pattern, placeholder in VOLATILE_PATTERNS:
        text = pattern.sub(placeholder, text)
    return text


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_a_demo_notebook_runs_headless_to_the_end(ran, name):
    _, nb = ran[name]
    assert not errors_of(nb), errors_of(nb)
    assert all(cell.get("execution_count") for cell in nb.cells if cell.cell_type == "code")


@pytest.mark.slow
def test_the_data_science_notebook_shows_a_dataframe_and_the_tool_image_inline(ran):
    _, nb = ran["data-science"]
    code = [c for c in nb.cells if c.cell_type == "code"]
    mimes = [set(o.get("data", {})) for c in code for o in c.outputs]
    assert any("text/html" in m and "text/plain" in m for m in mimes), "the DataFrame renders as a table"
    last = [set(o.get("data", {})) for o in code[-1].outputs]
    assert any("image/png" in m for m in last), f"read-file's PNG shows inline: {code[-1].outputs}"


def _text(cell) -> str:
    return "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) + o.get("evalue", "")
                   for o in cell.outputs)


@pytest.mark.slow
def test_the_approvals_notebook_is_answered_as_its_buttons_would_be(ran):
    folder, nb = ran["approvals"]
    code = [c for c in nb.cells if c.cell_type == "code"]
    allowed_once = next(c for c in code if c.metadata.get("toolkernel-demo", {}).get("answers") == ["once"])
    assert "deleting fix-x" in _text(allowed_once) and "deleted branch fix-x" in _text(allowed_once)
    unasked = next(c for c in code if "wip-auth feature/search-limits" in c.source)
    assert "deleted branch wip-auth" in _text(unasked) and "deleted branch feature/search-limits" in _text(unasked)
    last = code[-1]  # denied before the start: nothing ran, and (--no-raise-error) the notebook ends there
    assert [o for o in last.outputs if o.output_type == "error"] == [], last.outputs
    assert "denied; nothing ran" in _text(last) and "not reached" not in _text(last)
    assert not (folder / ".toolkernel" / "approvals.json").exists() or "delete_branch" not in (
        folder / ".toolkernel" / "approvals.json").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["approvals", "agent-notebook-editing"])
def test_toolkernel_demo_runs_a_shipped_demo_by_name(tmp_path, name):
    # `toolkernel demo NAME` copies the demos' own config (its rules included) beside the notebook.
    import subprocess

    from kernel_helpers import isolated_env

    env = {**os.environ, **isolated_env(tmp_path), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "toolkernel", "demo", name], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gives no answer" not in done.stderr
    if name == "approvals":
        assert "allowed once; running the script\ndeleting fix-x\n" in done.stdout
        assert "denied; nothing ran" in done.stdout
    else:
        assert "total is 90" in done.stdout, done.stdout
