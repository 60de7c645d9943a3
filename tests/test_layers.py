"""The layers of docs/architecture.md, read from the code: every `import` of a toolkernel module
(absolute or relative, at the top or inside a function) goes to the importer's own layer or a
lower one, and no two modules import each other, however far round the circle.

An import under `if TYPE_CHECKING:` never runs, but it still ties the two modules together: it
counts in a circle and may not go up a layer, unless `ALLOWED_TYPE_ONLY` names it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "toolkernel"

# Top first. A module belongs to the first entry that is its name or a package above it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("front ends", ("toolkernel", "toolkernel.__main__", "toolkernel._frontends", "toolkernel.demo_server")),
    ("session", ("toolkernel._session",)),
    ("runners", ("toolkernel._runners",)),
    ("command", ("toolkernel._command",)),
    ("approval", ("toolkernel._approval",)),
    ("providers", ("toolkernel._providers",)),
    ("journal", ("toolkernel._journal",)),
    ("config", ("toolkernel._config",)),
    ("shared", ("toolkernel._errors", "toolkernel._tool", "toolkernel._longtext", "toolkernel._names",
                "toolkernel._imports", "toolkernel._loop", "toolkernel._process", "toolkernel._atomic",
                "toolkernel._checked_open", "toolkernel._saved", "toolkernel._sandbox", "toolkernel._landlock_exec",
                "toolkernel._egress", "toolkernel._netbridge", "toolkernel._seccomp",
                "toolkernel._pycode", "toolkernel._shadowing", "toolkernel._mcp_sdk", "toolkernel._tempdirs")),
]

# (importer, imported) imports under TYPE_CHECKING that only feed annotations and may close a
# circle (or go up): the value checks name the `Source` they report against, and `Source`
# checks a JSON file's top level with one of them (`table`).
ALLOWED_TYPE_ONLY: set[tuple[str, str]] = {("toolkernel._config._check", "toolkernel._config._sources"),
                                           # a run's record and a shell run's comparison name the
                                           # journal they store in
                                           ("toolkernel._journal._record", "toolkernel._journal._store"),
                                           ("toolkernel._journal._scan", "toolkernel._journal._store")}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}
# C extensions, built from the source beside them where a compiler is at hand: they import nothing of ours.
EXTENSIONS = {module_name(p) for p in sorted(ROOT.rglob("*.c"))}


def layer_of(module: str) -> int:
    best = None
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (rank, len(prefix))
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best[0]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _target(base: str, name: str) -> str:
    """`from base import name` names the module base.name when there is one, else base itself."""
    return f"{base}.{name}" if f"{base}.{name}" in MODULES or f"{base}.{name}" in EXTENSIONS else base


def imports_of(module: str) -> list[tuple[str, int, bool]]:
    path = MODULES[module]
    return imports_in(module, path.read_text(), path.name == "__init__.py")


def imports_in(module: str, source: str, is_package: bool) -> list[tuple[str, int, bool]]:
    """(imported toolkernel module, line, type-only) for every import statement in the source."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, type_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, type_only)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "toolkernel" or alias.name.startswith("toolkernel."):
                    found.append((alias.name, node.lineno, type_only))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base == "toolkernel" or base.startswith("toolkernel."):
                for alias in node.names:
                    found.append((_target(base, alias.name), node.lineno, type_only))
        for child in ast.iter_child_nodes(node):
            visit(child, type_only)

    visit(ast.parse(source, module), False)
    return found


GRAPH = {module: [edge for edge in imports_of(module) if edge[0] not in EXTENSIONS] for module in MODULES}


def test_every_module_is_in_a_layer_and_every_import_is_found():
    for module, edges in GRAPH.items():
        layer_of(module)
        for target, line, _ in edges:
            assert target in MODULES, f"{module}:{line} imports {target}, which is no module of toolkernel"
    assert "toolkernel._providers._tools._numbering" in EXTENSIONS


def test_every_import_goes_to_the_same_layer_or_a_lower_one():
    upward = []
    for module, edges in GRAPH.items():
        for target, line, type_only in sorted(set(edges)):
            if layer_of(target) < layer_of(module) and not (type_only and (module, target) in ALLOWED_TYPE_ONLY):
                upward.append(f"{MODULES[module].relative_to(ROOT.parent)}:{line} ({LAYERS[layer_of(module)][0]})"
                              f" imports {target} ({LAYERS[layer_of(target)][0]})")
    assert not upward, "imports up a layer:\n" + "\n".join(upward)


def _cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), type-only imports too."""
    edges = {m: sorted({t for t, _, type_only in GRAPH[m]
                        if t != m and not (type_only and (m, t) in ALLOWED_TYPE_ONLY)}) for m in GRAPH}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges[node]:
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            connect(module)
    return found


def test_each_allowed_type_only_import_is_one_and_still_there():
    for module, target in ALLOWED_TYPE_ONLY:
        found = [type_only for t, _, type_only in GRAPH[module] if t == target]
        assert found and all(found), f"{module} -> {target} is no longer a type-only import: drop it"


def test_no_module_imports_itself_round_a_circle():
    circles = _cycles()
    assert not circles, "circles of imports:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_reader_sees_relative_imports_lazy_ones_and_type_only_ones():
    source = (
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "from .. import _loop\n"
        "from .._approval._dispatch import Dispatcher\n"
        "if TYPE_CHECKING:\n"
        "    from .._session import Session\n"
        "def later():\n"
        "    import toolkernel._frontends._magic\n"
        "    from ._shell import ShellResult\n"
    )
    found = imports_in("toolkernel._runners._probe", source, is_package=False)
    assert found == [
        ("toolkernel._loop", 3, False),
        ("toolkernel._approval._dispatch", 4, False),
        ("toolkernel._session", 6, True),
        ("toolkernel._frontends._magic", 8, False),
        ("toolkernel._runners._shell", 9, False),
    ]
    assert layer_of("toolkernel._runners._probe") == 2 and layer_of("toolkernel._frontends._magic") == 0
