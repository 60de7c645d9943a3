"""The install's cache of the built JupyterLab extension (hatch_build.py): a build is taken from
the cache only for the very sources it was built from; anything else is built again."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

pytest.importorskip("hatchling", reason="hatch_build.py is a hatchling build hook")

ROOT = Path(__file__).resolve().parents[1]


def load_hook():
    spec = importlib.util.spec_from_file_location("toolkernel_hatch_build", ROOT / "hatch_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hook = load_hook()


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A checkout's extension sources, a stale build in the package, and an empty per-user cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("HATCH_JUPYTER_BUILDER_SKIP_NPM", raising=False)
    root = tmp_path / "checkout"
    sources = root / "labextension"
    (sources / "src").mkdir(parents=True)
    (sources / "src" / "index.ts").write_text("export const a = 1;\n")
    (sources / "package.json").write_text('{"name": "toolkernel"}\n')
    (sources / "yarn.lock").write_text("# lock\n")
    build(root, "stale build of other sources")
    return root


def build(root: Path, text: str) -> None:
    """What the builder leaves in the package."""
    built = root / "toolkernel" / "labextension"
    (built / "static").mkdir(parents=True, exist_ok=True)
    (built / "package.json").write_text("{}\n")
    (built / "static" / "remoteEntry.js").write_text(text)


def shipped(root: Path) -> str:
    return (root / "toolkernel" / "labextension" / "static" / "remoteEntry.js").read_text()


def install(root: Path, builds_as: str) -> None:
    """One `pip install .` as the hooks run it: ours, then the builder's when the tree has no build."""
    fill = hook.built_extension_from_cache(root)
    if not (root / "toolkernel" / "labextension" / "package.json").exists():
        build(root, builds_as)
    if fill is not None:
        fill()


def asks_for_the_builder(root: Path) -> bool:
    return hook.BUILDER_REQUIREMENT in hook.CustomBuildHook(str(root), {}, None, None, "", "wheel").dependencies()


def test_a_build_already_in_the_tree_is_not_trusted_and_a_fresh_build_is_cached(checkout):
    assert asks_for_the_builder(checkout)
    install(checkout, builds_as="build 1")
    assert shipped(checkout) == "build 1"
    assert not asks_for_the_builder(checkout)


def test_the_same_sources_take_the_cached_build_without_building(checkout):
    install(checkout, builds_as="build 1")
    build(checkout, "left over from a developer's build")
    install(checkout, builds_as="build 2")
    assert shipped(checkout) == "build 1"
    assert os.environ["HATCH_JUPYTER_BUILDER_SKIP_NPM"] == "1"  # an editable install builds nothing either


@pytest.mark.parametrize("change", ["edit", "add", "rename", "lockfile", "package.json"])
def test_a_changed_source_is_built_again(checkout, change):
    install(checkout, builds_as="build 1")
    sources = checkout / "labextension"
    if change == "edit":
        (sources / "src" / "index.ts").write_text("export const a = 2;\n")
    elif change == "add":
        (sources / "src" / "more.ts").write_text("")
    elif change == "rename":
        (sources / "src" / "index.ts").rename(sources / "src" / "main.ts")
    elif change == "lockfile":
        (sources / "yarn.lock").write_text("# lock, upgraded\n")
    else:
        (sources / "package.json").write_text('{"name": "toolkernel", "version": "2"}\n')
    assert asks_for_the_builder(checkout)
    install(checkout, builds_as="build 2")
    assert shipped(checkout) == "build 2"


def test_what_the_build_writes_beside_the_sources_is_not_a_source(checkout):
    sources = checkout / "labextension"
    before = hook.sources_hash(sources)
    for made in ("node_modules/x/index.js", "lib/index.js", ".yarn/install-state.gz", "tsconfig.tsbuildinfo"):
        (sources / made).parent.mkdir(parents=True, exist_ok=True)
        (sources / made).write_text("made by the build")
    assert hook.sources_hash(sources) == before


def test_an_unwritable_cache_only_costs_a_build(checkout, tmp_path, monkeypatch):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    install(checkout, builds_as="build 1")
    install(checkout, builds_as="build 2")
    assert shipped(checkout) == "build 2"
