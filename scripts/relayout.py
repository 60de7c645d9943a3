"""Move toolkernel's modules into packages by layer (git mv) and rewrite every import.

    python scripts/relayout.py            # from the repository root; then run the tests

Relative imports inside toolkernel/ are resolved, mapped and made relative again from
the file's new place; `toolkernel._x` names elsewhere (tests, bench, docs, strings such as
monkeypatch targets) are mapped in place. Run it once, on a clean tree; docs/architecture.md
is drawn by hand.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

# Layers: front ends -> runners -> the `tools` command -> the approval layer -> providers; config.
MOVES = {
    "_magic": "_frontends._magic", "_answers": "_frontends._answers", "_direct": "_frontends._direct",
    "_cli_sink": "_frontends._cli_sink", "_report": "_frontends._report", "_lab": "_frontends._lab",
    "_kernelspec": "_frontends._kernelspec", "_serve": "_frontends._serve",
    "_shell": "_runners._shell", "_bashkit": "_runners._bashkit", "_preflight": "_runners._preflight",
    "_outputs": "_runners._outputs", "_guard": "_runners._guard", "_hostbash": "_runners._hostbash",
    "_caps": "_runners._caps",
    "_command": "_command._command", "_cli": "_command._cli", "_catalog": "_command._catalog",
    "_help": "_command._help", "_render": "_command._render",
    "_dispatch": "_approval._dispatch", "_policy": "_approval._policy", "_hooks": "_approval._hooks",
    "_approvals": "_approval._approvals", "_approver": "_approval._approver", "_run": "_approval._run",
    "_bash_rules": "_approval._bash_rules",
    "_providers": "_providers._base", "_mcp": "_providers._mcp", "_stdio": "_providers._stdio",
    "_tools": "_providers._tools", "_notebook": "_providers._notebook", "_commands": "_providers._commands",
    "_config": "_config._config", "_trust": "_config._trust", "_lint": "_config._lint",
    "_config_cache": "_config._cache", "_limits": "_config._limits",
}
PACKAGES = {
    "_frontends": "Front ends: the IPython magics, the person's answers, direct calls, JupyterLab's kernel side, serve.",
    "_runners": "Script runners: Bashkit on its own thread, host bash with a `tools` shim, the before-start check, "
                "output limits, what scripts may not write.",
    "_command": "The `tools` command: argv, stdin and cwd in; the call's route through the catalog out.",
    "_approval": "The approval layer: the dispatcher every call passes, policy, hooks, approvals and the approver, "
                 "the run's record.",
    "_providers": "Where tools come from: one door (ToolProvider) for own, notebook, MCP and command tools.",
    "_config": "Reading toolkernel.toml, .mcp.json and the admin file (cached by fingerprint); the [shell] "
               "limits; workspace trust; lint.",
}
# Code that reaches a module through its package's attributes, which a rename alone would break.
FIXUPS = {
    "tests/test_bypass.py": [(
        """__import__('toolkernel._cli_sink')"\n    "._cli_sink.PrintSink())""",
        """__import__('toolkernel._cli_sink', "\n    "fromlist=['PrintSink']).PrintSink())""",
    )],
}
ROOT = "toolkernel"
_REL = re.compile(r"^(?P<indent>[ \t]*)from (?P<dots>\.+)(?P<mod>[\w.]*) import (?P<names>\([^)]*\)|[^\n]*)",
                  re.M)


def new_name(absolute: str) -> str:
    """toolkernel._policy(.x) -> toolkernel._approval._policy(.x)."""
    parts = absolute.split(".")
    if len(parts) >= 2 and parts[0] == ROOT and parts[1] in MOVES:
        return ".".join([ROOT, *MOVES[parts[1]].split("."), *parts[2:]])
    return absolute


def package_of(path: Path) -> str:
    parts = list(path.with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] != "__init__" else parts[:-1])


def relative(target: str, package: str) -> str:
    """`from X import` spelled relative to `package`."""
    t, p = target.split("."), package.split(".")
    common = 0
    while common < min(len(t), len(p)) and t[common] == p[common]:
        common += 1
    return "." * (len(p) - common + 1) + ".".join(t[common:])


def rewrite_relative(text: str, old_package: str, new_package: str) -> str:
    def one(m: re.Match) -> str:
        base = old_package.split(".")
        up = len(m["dots"]) - 1
        base = base[: len(base) - up] if up else base
        absolute = ".".join(base + ([m["mod"]] if m["mod"] else []))
        if m["mod"]:
            return f"{m['indent']}from {relative(new_name(absolute), new_package)} import {m['names']}"
        # `from . import _loop, _help`: the names are modules, maybe moved apart.
        names = [n.strip() for n in m["names"].strip("()").split(",") if n.strip()]
        groups: dict[str, list[str]] = {}
        for name in names:
            moved = new_name(f"{absolute}.{name.split(' as ')[0]}")
            parent, leaf = moved.rsplit(".", 1)
            groups.setdefault(parent, []).append(leaf + name[len(name.split(' as ')[0]):])
        return "\n".join(f"{m['indent']}from {relative(parent, new_package)} import {', '.join(leaves)}"
                         for parent, leaves in groups.items())

    return _REL.sub(one, text)


def main() -> None:
    sources = sorted(Path(ROOT).rglob("*.py"))
    old_packages = {path: package_of(path) for path in sources}
    for package, doc in PACKAGES.items():
        Path(ROOT, package).mkdir(exist_ok=True)
    for old, new in MOVES.items():
        src = Path(ROOT, old + ".py") if Path(ROOT, old + ".py").exists() else Path(ROOT, old)
        if not src.exists():
            continue
        dst = Path(ROOT, *new.split("."))
        dst = dst if src.is_dir() else dst.with_suffix(".py")
        subprocess.run(["git", "mv", str(src), str(dst)], check=True)
    for package, doc in PACKAGES.items():
        init = Path(ROOT, package, "__init__.py")
        if not init.exists():
            init.write_text(f'"""{doc}"""\n')
            subprocess.run(["git", "add", str(init)], check=True)
    for old_path, old_package in old_packages.items():
        module = old_package if old_path.name == "__init__.py" else f"{old_package}.{old_path.stem}"
        new_module = new_name(module)
        new_path = Path(*new_module.split(".")).with_suffix(".py")
        if old_path.name == "__init__.py":
            new_path = Path(*new_module.split("."), "__init__.py")
        new_package = new_module if old_path.name == "__init__.py" else new_module.rsplit(".", 1)[0]
        text = new_path.read_text()
        new_path.write_text(_absolute(rewrite_relative(text, old_package, new_package)))
    for name, fixes in FIXUPS.items():
        text = Path(name).read_text()
        for old, new in fixes:
            text = text.replace(old, new)
        Path(name).write_text(text)
    for path in [*Path("tests").rglob("*.py"), *Path("bench").rglob("*.py"), *Path("docs").rglob("*.md")]:
        path.write_text(_absolute(path.read_text()))


def _absolute(text: str) -> str:
    return re.sub(r"\btoolkernel(?:\.\w+)+", lambda m: new_name(m[0]), text)


if __name__ == "__main__":
    main()
