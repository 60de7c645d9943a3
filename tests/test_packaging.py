"""toolkernel shares one environment with Jupyter AI and JupyterLab's collaboration (issue 47).

What pip resolves against is the installed metadata: its requirements must admit what Jupyter AI 3.2
(through jupyter-server-mcp and fastmcp 3: mcp<2) and jupyter-collaboration 4 and 5 (their pycrdt and
jupyter-ydoc) bring, and keep out what toolkernel does not work with. `.ci/run` runs the files that reach
the SDK and the shared notebook on the ends of each range."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distribution, requires, version

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ADMITTED = [
    ("mcp", "1.27.0"),            # the oldest 1.x taken (ci/oldest.txt)
    ("mcp", "1.30.0"),            # what jupyter-ai 3.2 resolves to (fastmcp 3.4: mcp>=1.24,<2)
    ("mcp", "2.3.0"),             # the 2.x line
    ("pycrdt", "0.12.23"),        # jupyter-collaboration 4.0 (ci/oldest.txt)
    ("pycrdt", "0.13.1"),         # jupyter-collaboration 4 beside jupyter-ai 3.2
    ("pycrdt", "0.14.13"),        # jupyter-collaboration 5
    ("jupyter-ydoc", "3.1.0"),
    ("jupyter-ydoc", "3.5.0"),    # jupyter-collaboration 4 beside jupyter-ai 3.2
    ("jupyter-ydoc", "4.2.1"),    # jupyter-collaboration 5
]

REFUSED = [
    ("mcp", "1.26.0"),            # its HTTP sessions never end when idle
    ("mcp", "2.2.0"),             # caps no server-sent event's size
    ("mcp", "2.4.0"),             # not tried
    ("pycrdt", "0.12.22"),        # no sticky indexes
    ("pycrdt", "0.15.0"),         # not tried
    ("jupyter-ydoc", "3.0.5"),    # wants pycrdt<0.11
    ("jupyter-ydoc", "5.0.0"),    # not tried
]


def declared(name: str) -> Requirement:
    """toolkernel's own requirement on `name` (its extras' left out), as pip reads it."""
    found = [r for r in map(Requirement, requires("toolkernel") or ()) if r.name == name
             and (r.marker is None or "extra" not in str(r.marker))]
    assert len(found) == 1, f"toolkernel declares {name} {len(found)} times"
    return found[0]


@pytest.mark.parametrize(("name", "wanted"), ADMITTED, ids=[f"{n}-{v}" for n, v in ADMITTED])
def test_the_declared_range_admits_what_jupyter_ai_and_collaboration_bring(name, wanted):
    assert declared(name).specifier.contains(wanted), f"toolkernel's {declared(name)} refuses {name} {wanted}"


@pytest.mark.parametrize(("name", "refused"), REFUSED, ids=[f"{n}-{v}" for n, v in REFUSED])
def test_the_declared_range_keeps_out_what_does_not_work(name, refused):
    assert not declared(name).specifier.contains(refused), f"toolkernel's {declared(name)} admits {name} {refused}"


def test_jupyter_ai_shares_the_environment():
    """The README's test environment (the `test` extra) has Jupyter AI beside toolkernel, pip finds
    nothing broken, and Jupyter AI's server extensions import on the mcp that toolkernel runs on.
    Elsewhere (.ci/run's venvs of the other ends) skipped: they leave Jupyter AI out."""
    if os.environ.get("TOOLKERNEL_ENDS"):
        pytest.skip(f"the {os.environ['TOOLKERNEL_ENDS']} ends' venv has no Jupyter AI")
    if not os.environ.get("CI"):
        pytest.importorskip("jupyter_ai")
    assert version("jupyter-ai") == "3.2.0"
    checked = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    imported = subprocess.run(
        [sys.executable, "-c", "import jupyter_ai, jupyter_server_mcp, jupyter_ai_acp_client, toolkernel._mcp_sdk as s;"
         " print(s.MAJOR)"], capture_output=True, text=True)
    assert imported.returncode == 0 and imported.stdout.strip() == "1", imported.stderr



def _closure(*names: str) -> set[str]:
    """These distributions and every one they require (extras left out), as installed here."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            needs = distribution(name).requires or ()
        except PackageNotFoundError:
            continue
        todo += [r.name for r in map(Requirement, needs) if r.marker is None or "extra" not in str(r.marker)]
    return seen


def _server_extensions_enabled_by(names: set[str]) -> set[str]:
    """The server extensions these distributions enable (their jupyter_server_config.d files)."""
    enabled = set()
    for name in names:
        for file in distribution(name).files or ():
            if "jupyter_server_config.d" in file.parts and file.suffix == ".json":
                said = json.loads(file.read_text())["ServerApp"]["jpserver_extensions"]
                enabled |= {extension for extension, on in said.items() if on}
    return enabled


def _lab_extensions_installed_by(names: set[str]) -> set[str]:
    """The JupyterLab extensions these distributions install (share/jupyter/labextensions)."""
    installed = set()
    for name in names:
        for file in distribution(name).files or ():
            parts = file.parts
            if "labextensions" in parts and file.name == "package.json":
                depth = len(parts) - parts.index("labextensions")  # labextensions/[@scope/]name/package.json
                if depth == 3 or (depth == 4 and parts[-3].startswith("@")):
                    installed.add(json.loads(file.read_text())["name"])
    return installed


def test_the_test_servers_leave_off_every_extension_jupyter_ai_brings():
    """Every test Jupyter Server but the Jupyter AI test's loaded them, at 1.5-2 s of CPU each
    (issue 44: the suite's 10 minutes): what jupyter-ai brings beyond JupyterLab and collaboration,
    server extensions and their parts in Lab's page, must be in the helpers' lists, also after a
    Jupyter AI upgrade adds one."""
    if os.environ.get("TOOLKERNEL_ENDS"):
        pytest.skip(f"the {os.environ['TOOLKERNEL_ENDS']} ends' venv has no Jupyter AI")
    if not os.environ.get("CI"):
        pytest.importorskip("jupyter_ai")
    from jupyter_server_helpers import JUPYTER_AI_LAB_EXTENSIONS, NO_COLLABORATION, NO_JUPYTER_AI

    jupyter_ai_alone = _closure("jupyter-ai") - _closure("jupyterlab", "jupyter-collaboration")
    brought = _server_extensions_enabled_by(jupyter_ai_alone)
    assert "jupyter_server_mcp" in brought, brought
    for turned_off in (NO_COLLABORATION, NO_JUPYTER_AI):
        off = {extension for extension, on in ast.literal_eval(turned_off).items() if not on}
        assert brought <= off, f"left on: {sorted(brought - off)}"
    in_the_page = _lab_extensions_installed_by(jupyter_ai_alone)  # left on, they ask for the servers' parts
    assert "jupyterlab-chat-extension" in in_the_page, in_the_page
    left_on = in_the_page.difference(JUPYTER_AI_LAB_EXTENSIONS)
    assert not left_on, f"left on in the page: {sorted(left_on)}"

ENDS = {  # what .ci/run's venvs of the other ends must hold, or they test nothing new
    "newest": {"mcp": "2.3."},
    "oldest": {"mcp": "1.27.0", "pycrdt": "0.12.23", "jupyter-ydoc": "3.1.0", "jupyter-collaboration": "4.0.2"},
}


@pytest.mark.skipif(not os.environ.get("TOOLKERNEL_ENDS"), reason="only in .ci/run's venvs of the other ends")
def test_the_ends_venv_holds_its_ends():
    wanted = ENDS[os.environ["TOOLKERNEL_ENDS"]]
    held = {name: version(name) for name in wanted}
    assert all(held[name].startswith(v) if v.endswith(".") else held[name] == v for name, v in wanted.items()), held
