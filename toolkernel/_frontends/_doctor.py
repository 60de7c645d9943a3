"""`toolkernel doctor` and `%tools doctor`: is the whole setup here in order, and what to do where not.

One line a check, each with its state: ok, note (works, with a caveat) or FAIL, and for each that
is not ok what to do. The checks: the JupyterLab extension (installed, enabled), the kernelspec, the
folder's config (it reads; it is trusted), its servers (each started and asked for its tools), how
a shell run's changes are found, node for a source build, and the OS sandbox's section
(`_runners._sandbox_plan.doctor`, whose own lines come as they are).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import printable

OK, NOTE, FAIL = "ok", "note", "FAIL"
SERVER_START_SECONDS = 30.0  # a server that lists no tools by then counts as not starting
EXTENSION = "toolkernel"  # the JupyterLab extension's package name
KERNEL_NAME = "toolkernel"  # `toolkernel install-kernel`'s kernelspec


@dataclass(frozen=True)
class Line:
    state: str  # OK, NOTE or FAIL
    what: str  # the thing checked: "JupyterLab extension"
    said: str  # what was found
    fix: str = ""  # what to do, where the state is not OK

    def text(self) -> str:
        fix = f"\n      → {self.fix}" if self.fix and self.state != OK else ""
        return f"  [{self.state:>4}] {self.what}: {self.said}{fix}"


def doctor(workdir: Path, session: Any = None) -> tuple[str, bool]:
    """The report, and whether every check passed (notes pass). `session`: a kernel's own (its
    servers are asked as they run there); else one is made for the check and closed after it."""
    workdir = Path(workdir).resolve()
    lines = [lab_extension(), kernelspec(), *config_lines(workdir), *server_lines(workdir, session),
             changes_line(session), node_line()]
    from .._runners._sandbox_plan import doctor as sandbox_doctor

    report = "\n".join([f"toolkernel doctor: {printable(str(workdir))} {environment_note()}",
                        *(line.text() for line in lines), "", sandbox_doctor(workdir)])
    return report, all(line.state != FAIL for line in lines)


# -- JupyterLab ------------------------------------------------------------------------------------


def lab_extension() -> Line:
    """The prebuilt extension where JupyterLab looks, and not disabled in its page config."""
    what = "JupyterLab extension"
    try:
        from jupyter_core.paths import jupyter_path
        from jupyterlab_server.config import get_page_config
    except ImportError:
        return Line(NOTE, what, "JupyterLab is not installed here (the questions show as text prompts)",
                    "for the buttons, the Tools and Changes sidebars: pip install 'jupyterlab>=4.6'")
    paths = jupyter_path("labextensions")
    found = next((Path(p) / EXTENSION for p in paths if (Path(p) / EXTENSION / "package.json").is_file()), None)
    if found is None:
        return Line(FAIL, what, "not installed where JupyterLab looks (" + ", ".join(paths) + ")",
                    "reinstall toolkernel into the environment JupyterLab runs from (pip install toolkernel);"
                    " from a checkout, pip install -e . builds it")
    try:
        version = json.loads((found / "package.json").read_text()).get("version", "?")
    except (OSError, ValueError):
        version = "?"
    disabled = get_page_config(paths).get("disabledExtensions") or {}
    if isinstance(disabled, list):  # the form of older page configs
        disabled = {name: True for name in disabled}
    if any(disabled.get(name) for name in (EXTENSION, f"{EXTENSION}:plugin")):
        return Line(FAIL, what, f"{EXTENSION} {version} is installed but disabled ({found})",
                    f"jupyter labextension enable {EXTENSION}, then reload the page")
    return Line(OK, what, f"{EXTENSION} {version}, enabled ({found})")


def kernelspec() -> Line:
    what = "kernelspec"
    try:
        from jupyter_client.kernelspec import KernelSpecManager

        specs = KernelSpecManager().find_kernel_specs()
    except Exception as exc:  # noqa: BLE001 - a broken kernel folder is what is reported
        return Line(FAIL, what, f"the kernelspecs cannot be listed ({type(exc).__name__}: {exc})",
                    "jupyter kernelspec list says which folder is broken")
    if KERNEL_NAME in specs:
        return Line(OK, what, f"'Python 3 (toolkernel)' in {specs[KERNEL_NAME]}")
    return Line(NOTE, what, "'Python 3 (toolkernel)' is not installed (any Python kernel works with"
                " %load_ext toolkernel)", "toolkernel install-kernel --user: a kernel that loads toolkernel at start")


# -- the folder's config and servers ---------------------------------------------------------------


def config_lines(workdir: Path) -> list[Line]:
    from .._config._config import read_config
    
    try:
        config, problems = read_config(workdir)
    except Exception as exc:  # noqa: BLE001 - an unreadable config is the finding
        return [Line(FAIL, "config", printable(str(exc)), "toolkernel lint says each problem and where")]
    lines = []
    if problems:
        lines.append(Line(FAIL, "config", f"{len(problems)} problem(s), the first: {printable(str(problems[0]))}",
                          "toolkernel lint lists them all; a config with a problem is refused whole"))
    else:
        lines.append(Line(OK, "config", "reads without a problem"))
    to_trust = tuple(getattr(config, "to_trust", ()) or ()) if config is not None else ()
    if to_trust:
        lines.append(Line(FAIL, "trust", "not trusted, so its servers, hooks, allow rules and lasting approvals are"
                          " not used: " + ", ".join(printable(folder) for folder in to_trust),
                          "read its config, then " + "; ".join(f"toolkernel trust {printable(f)}" for f in to_trust)
                          + " (or answer the question a %%tools cell asks)"))
    else:
        lines.append(Line(OK, "trust", "every config that applies here is trusted (or there is none to trust)"))
    return lines


def server_lines(workdir: Path, session: Any = None) -> list[Line]:
    """Each configured MCP server started (or asked, in a kernel where it runs) for its tools."""
    from .. import _loop
    from .._errors import ConfigError

    own = session is None
    if own:
        from .._session import Session

        session = Session(workdir)
    try:
        try:
            command = _loop.run(session.prepare(one_call=True))
        except ConfigError as exc:
            return [Line(FAIL, "servers", f"not started: the config is refused ({printable(str(exc))})",
                         "toolkernel lint")]
        names = list(command.catalog.servers)
        if not names:
            untrusted = command.dispatcher.env.not_trusted
            return [Line(NOTE if untrusted else OK, "servers",
                         "none used: the config that may name some is not trusted" if untrusted else "none configured",
                         "see trust above" if untrusted else "")]
        results = _loop.run(_list_tools(command.catalog, names), timeout=SERVER_START_SECONDS * 2)
        return [_server_line(name, result) for name, result in zip(names, results)]
    finally:
        if own:
            session.close()


async def _list_tools(catalog, names: list[str]) -> list[Any]:
    async def one(name: str) -> Any:
        try:
            return await asyncio.wait_for(catalog.server_tools(name), SERVER_START_SECONDS)
        except Exception as exc:  # noqa: BLE001 - a server that does not start is the finding
            return exc

    return await asyncio.gather(*(one(name) for name in names))


def _server_line(name: str, result: Any) -> Line:
    what = f"server {printable(name)}"
    if isinstance(result, list):
        return Line(OK, what, f"starts, {len(result)} tool{'s' if len(result) != 1 else ''}")
    if isinstance(result, asyncio.TimeoutError):
        why = f"listed no tools within {SERVER_START_SECONDS:g} s"
    else:
        why = printable(getattr(result, "message", None) or f"{type(result).__name__}: {result}")
    return Line(FAIL, what, f"does not start: {why}",
                f"run its command by hand to see its error; `tools {printable(name)} --help` in a cell says the same")


# -- the journal of changes ------------------------------------------------------------------------

def changes_line(session: Any = None) -> Line:
    """How a shell run's own changes are found: the journal's word (this kernel's watch, when the
    session has followed the workspace already; else what a kernel here would use)."""
    from .._journal import doctor_line

    state, found, fix = doctor_line(getattr(session, "journal", None))
    return Line(state, "changes", found, fix)


# -- building the extension ------------------------------------------------------------------------


def node_line() -> Line:
    what = "node"
    node = shutil.which("node")
    if node is None:
        return Line(NOTE, what, "not found: only a build of the extension from source needs it (a wheel ships it"
                    " built)", "for pip install from a checkout: node 20 or later (e.g. apt-get install nodejs)")
    try:
        version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return Line(NOTE, what, f"{node} does not run ({exc})", "node 20 or later, for a build from source")
    major = int(version.lstrip("v").split(".")[0]) if version.lstrip("v").split(".")[0].isdigit() else 0
    if major < 20:
        return Line(NOTE, what, f"{version} at {node}: a build from source needs 20 or later",
                    "install node 20 or later before pip install from a checkout")
    return Line(OK, what, f"{version} at {node} (for a build of the extension from source)")


def environment_note() -> str:
    """Which Python this is: the doctor checks the environment it runs in."""
    return f"(Python {sys.executable})"
