"""`toolkernel demo [NOTEBOOK]`: run a notebook headless against the demo MCP server.
`toolkernel trust [DIR]`: trust a folder's toolkernel config as it is now (see `_trust`).
`toolkernel lint [DIR]`: check the config that applies to DIR without starting anything.
`toolkernel serve [--http HOST:PORT] [--token T]`: Tools in Shell for any MCP client (see `_serve`).
`toolkernel approve [ID once|always|deny]`: list or answer the calls a `serve` client waits on.
`toolkernel doctor`: the whole setup checked, each failing line with what to do (`_frontends._doctor`).

With no notebook, runs the quickstart that ships with the package (or another shipped demo
by name), in a fresh temporary folder holding the demos' toolkernel.toml (the demo server,
`python -m toolkernel.demo_server` on the kernel's own Python), and prints what every cell
printed. Questions are answered from each cell's metadata, as JupyterLab's buttons would be.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from ._config._trust import TRUST_ALL_VARIABLE

DEMOS = ("quickstart", "approvals", "data-science", "agent-notebook-editing")
# `serve --server` with no URL: the Jupyter Server running here that serve works for.
HERE = object()


def demo_folder() -> Path:
    """The demo notebooks and their toolkernel.toml: shipped in the package (`_demo/`), else
    this checkout's `notebooks/`."""
    packaged = Path(__file__).parent / "_demo"
    return packaged if (packaged / "toolkernel.toml").exists() else Path(__file__).resolve().parent.parent / "notebooks"


def quickstart_path() -> Path:
    return demo_folder() / "quickstart.ipynb"


def demo_notebook(name_or_path: str) -> Path:
    """A shipped demo by name (`approvals`), or a notebook's path."""
    return demo_folder() / f"{name_or_path}.ipynb" if name_or_path in DEMOS else Path(name_or_path)


def run_demo(notebook: Path, timeout: int = 300) -> int:
    import nbformat
    from nbclient.exceptions import CellExecutionError

    from ._frontends._demo import AnsweringClient
    from ._providers._notebook._zmq import SafeKernelManager

    nb = nbformat.read(notebook, as_version=4)
    # The demo's kernel trusts the config the demo copies itself (see _trust.py),
    # without leaving a record for a temporary folder in the person's trust file.
    os.environ[TRUST_ALL_VARIABLE] = "1"
    with tempfile.TemporaryDirectory(prefix="toolkernel-demo-") as workdir:
        # The demos' own config: the demo server on the kernel's Python, the rules they rely on.
        (Path(workdir) / "toolkernel.toml").write_bytes((demo_folder() / "toolkernel.toml").read_bytes())
        # Its questions are answered as the buttons would be, from each cell's metadata (`_demo`).
        client = AnsweringClient(nb, timeout=timeout, kernel_name="python3", kernel_manager_class=SafeKernelManager,
                                 resources={"metadata": {"path": workdir}})
        try:
            client.execute()
            failed = None
        except CellExecutionError as exc:
            failed = exc
    print_outputs(nb, notebook.name)
    for index, prompt in client.unanswered:
        print(f"\ncell [{_code_number(nb, index)}] asked, and its metadata gives no answer for: {prompt}", file=sys.stderr)
    if failed is not None:
        print(f"\nthe notebook stopped at a failing cell:\n{failed}", file=sys.stderr)
        return 1
    return 0


def print_outputs(nb, name: str = "") -> None:
    """The notebook as a person reads it: its name, markdown as written, code cells numbered as
    Lab numbers them (1, 2, 3 over the code cells only), each with what it printed."""
    if name:
        print(f"═══ {name} ═══\n")
    number = 0
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            print(cell.source.rstrip() + "\n")
            continue
        if cell.cell_type != "code":
            continue
        number += 1
        print(f"── [{number}] " + "─" * 40)
        print(cell.source)
        outputs = "".join(_output_text(output) for output in cell.get("outputs", []))
        if outputs:
            print("── output:")
            print(outputs, end="" if outputs.endswith("\n") else "\n")
        print()


def _code_number(nb, index: int) -> int:
    """The number `print_outputs` shows for the notebook's cell at `index` (code cells counted)."""
    return sum(1 for cell in nb.cells[:index + 1] if cell.cell_type == "code")


def _output_text(output) -> str:
    if output.output_type == "stream":
        return output.text
    if output.output_type == "error":
        return f"{output.ename}: {output.evalue}\n"
    data = output.get("data", {})
    if "text/plain" in data:
        return data["text/plain"] + "\n"
    return f"[{', '.join(data)}]\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="toolkernel", description="Tools in Shell for Jupyter")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a notebook headless against the demo MCP server")
    demo.add_argument("notebook", nargs="?", help=f"a shipped demo ({', '.join(DEMOS)}) or a notebook's path;"
                      " default: quickstart")
    trust = sub.add_parser("trust", help="trust a folder's toolkernel config (servers, hooks, allow rules)"
                           " as it is now; a changed file needs trust again")
    trust.add_argument("folder", nargs="?", type=Path, default=Path("."), help="default: this folder")
    check = sub.add_parser("lint", help="check the config statically: rules, hooks, command tools")
    check.add_argument("directory", nargs="?", type=Path, default=Path.cwd(),
                       help="the working directory whose config files are checked (default: here)")
    kernel = sub.add_parser("install-kernel", help='install the "Python 3 (toolkernel)" kernel (loads toolkernel at start)')
    where = kernel.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="for the current user only")
    where.add_argument("--sys-prefix", action="store_true", help="into this Python environment (sys.prefix)")
    where.add_argument("--prefix", help="under this prefix (share/jupyter/kernels)")
    serve = sub.add_parser("serve", help="serve Tools in Shell to an MCP client (stdio, or --http)")
    serve.add_argument("--http", metavar="HOST:PORT", help="streamable HTTP at /mcp instead of stdio")
    serve.add_argument("--token", default=os.environ.get("TOOLKERNEL_SERVE_TOKEN"),
                       help="the bearer token every HTTP request must carry; default $TOOLKERNEL_SERVE_TOKEN"
                            " (which other users cannot see in `ps`), else a new one, printed at the start")
    serve.add_argument("--no-token", action="store_true",
                       help="on loopback only: no token (any local user or program can then run tools)")
    serve.add_argument("--workdir", type=Path, default=Path.cwd(), help="the working directory (default: here)")
    paired = serve.add_argument_group("notebooks the agent edits and runs (notebook_read, notebook_edit, notebook_run)")
    paired.add_argument("--notebook", metavar="PATH", help="the notebook (.ipynb) calls without a path are about;"
                        " with --kernel, --existing or --server (then its path from the server's root)")
    paired.add_argument("--kernel", metavar="NAME", help="start a kernel NAME for it (shut down when serve ends)")
    paired.add_argument("--existing", metavar="CONNECTION_FILE", help="use a running kernel")
    paired.add_argument("--server", metavar="URL", nargs="?", const=HERE,
                        help="edit and run notebooks through this Jupyter Server: each"
                        " call's notebook, by its path from the server's root, in the kernel of its session there"
                        " (config `[serve] start_kernels = true` lets a call start one); with no URL, the server"
                        " running here that serve runs under (an agent Jupyter AI started), else the one whose"
                        " root holds --workdir")
    paired.add_argument("--server-token", metavar="T", default=None,
                        help="the Jupyter Server's token (or ?token= in URL; a server running here: the token it"
                             " published in `jupyter --runtime-dir`; else $JUPYTER_TOKEN);"
                             " --token is serve's own bearer token")
    doctor = sub.add_parser("doctor", help="check the setup here: the JupyterLab extension, the kernelspec, the"
                            " config and its trust, the servers, node, the OS sandbox; each failing line says"
                            " what to do (exit 1 when one fails)")
    doctor.add_argument("--workdir", type=Path, default=Path.cwd(), help="the project folder (default: here)")
    approve = sub.add_parser("approve", help="list the calls that wait for a person (from `toolkernel serve`),"
                             " or answer one: toolkernel approve ID once|always|deny")
    approve.add_argument("request", nargs="?", metavar="ID", help="a request id, as the list shows it")
    approve.add_argument("decision", nargs="?", choices=("once", "always", "deny"))
    approve.add_argument("--workdir", type=Path, default=Path.cwd(), help="the project folder (default: here)")
    _add_journal_commands(sub)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the command's own parser: its usage, not the list of all commands
        sub.choices[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command in ("changes", "rewind"):
        return run_journal_command(args)
    if args.command == "serve":
        return run_serve(args)
    if args.command == "approve":
        return run_approve(args)
    if args.command == "demo":
        return run_demo(demo_notebook(args.notebook or "quickstart"))
    if args.command == "trust":
        return run_trust(args.folder)
    if args.command == "lint":
        return run_lint(args.directory)
    if args.command == "install-kernel":
        return _install_kernel(args)
    if args.command == "doctor":
        from ._frontends._doctor import doctor

        report, passed = doctor(args.workdir)
        print(report)
        return 0 if passed else 1
    return 2


def _add_journal_commands(sub) -> None:
    from ._frontends._changes import add_changes_arguments, add_rewind_arguments

    changes = sub.add_parser("changes", help="list what toolkernel's runs changed in the workspace, newest first")
    add_changes_arguments(changes)
    rewind = sub.add_parser("rewind", help="put back the files a run changed: toolkernel rewind ID|--last")
    add_rewind_arguments(rewind)
    for parser in (changes, rewind):
        parser.add_argument("--workdir", type=Path, default=Path.cwd(), help="the project folder (default: here)")


def run_journal_command(args: argparse.Namespace) -> int:
    from ._frontends._changes import changes_text, journal_for, rewind_text
    from ._journal import RewindError

    journal = journal_for(args.workdir)
    try:
        print(changes_text(journal, args) if args.command == "changes" else rewind_text(journal, args))
    except ValueError as exc:
        print(f"toolkernel {args.command}: {exc}", file=sys.stderr)
        return 2
    except RewindError as exc:
        print(f"toolkernel {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


def run_trust(folder: Path) -> int:
    from ._errors import ConfigError
    from ._config._trust import trust_command

    try:
        print(trust_command(folder))
    except ConfigError as exc:
        print(f"toolkernel trust: {exc}", file=sys.stderr)
        return 1
    return 0


def run_serve(args: argparse.Namespace) -> int:
    from ._frontends._serve import serve_command

    if args.server is HERE:
        from ._errors import InvalidInput
        from ._providers._notebook._roots import server_here

        try:
            args.server = server_here(args.workdir).url
        except InvalidInput as exc:
            print(f"toolkernel serve: {exc}", file=sys.stderr)
            return 2
    options = {"kernel": args.kernel, "existing": args.existing, "server": args.server, "token": args.server_token}
    notebook = {k: v for k, v in options.items() if v}
    if args.notebook:
        notebook["notebook"] = args.notebook
    elif notebook and not args.server:
        print("toolkernel serve: --kernel, --existing and --server-token pair a notebook: give --notebook PATH"
              " (or --server URL, whose notebooks are paired per call)", file=sys.stderr)
        return 2
    elif args.existing:
        print("toolkernel serve: --existing pairs one notebook: give --notebook PATH", file=sys.stderr)
        return 2
    return serve_command(args.workdir, http=args.http, token=args.token, notebook=notebook or None,
                         no_token=args.no_token)


def run_approve(args: argparse.Namespace) -> int:
    from ._approval._pending import PendingError
    from ._errors import ConfigError
    from ._frontends._answers import answer_request, waiting_requests

    if args.request and not args.decision:
        print("toolkernel approve: say once, always or deny after the id", file=sys.stderr)
        return 2
    try:
        print(answer_request(args.workdir, args.request, args.decision) if args.request
              else waiting_requests(args.workdir))
    except (PendingError, ConfigError) as exc:
        print(f"toolkernel approve: {exc}", file=sys.stderr)
        return 1
    return 0


def run_lint(directory: Path) -> int:
    from ._frontends._lint import check, report

    findings, notes = check(directory)
    print(report(findings, notes), end="")
    return 1 if findings else 0


def _install_kernel(args) -> int:
    from ._frontends._kernelspec import DISPLAY_NAME, install_kernel

    prefix = sys.prefix if args.sys_prefix else args.prefix
    folder = install_kernel(user=args.user, prefix=prefix)
    print(f"installed {DISPLAY_NAME!r} in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
