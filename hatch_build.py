"""Build hook: the JupyterLab extension from a per-user cache when its sources have not changed,
and read_file's numbering in C (toolkernel/_providers/_tools/_numbering.c), compiled into the
package where a C compiler is at hand.

The extension (labextension/ built into toolkernel/labextension by hatch-jupyter-builder, whose
hook runs after this one) takes minutes to build: `jlpm install` fetches 400 MB of node modules.
Its output depends only on labextension/'s own files (sources, package.json, yarn.lock, configs),
so it is kept under `$XDG_CACHE_HOME/toolkernel/labextension/<sha256 of those files>` and copied
in when that hash is found. A built extension already in the tree is never trusted as it is: it
is replaced by the cached copy of the current sources, or removed so that the builder (with
`skip-if-exists`) builds it again; a changed source always rebuilds, and its build fills the cache.

It is only faster than the Python numbering beside it (files.py), which the package uses where
the compile fails: `pip install .` works on a machine without a compiler, and says so. The
module is built in place, next to its source, as the JupyterLab extension is, so that a checkout
the tests run from has it too; the wheel then takes it, and is tagged for this platform.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

MODULE = "toolkernel._providers._tools._numbering"
SOURCE = "toolkernel/_providers/_tools/_numbering.c"


# Made by the build or by the developer's tools, not inputs of the extension.
NOT_SOURCES = {"node_modules", "lib", ".yarn", "tsconfig.tsbuildinfo"}
EXTENSION_SOURCES = "labextension"
BUILT_EXTENSION = "toolkernel/labextension"
CACHE_FORMAT = "1"  # part of the hash: a change in what the cache holds starts a new one
BUILDER_REQUIREMENT = "jupyterlab>=4.6,<5"


class CustomBuildHook(BuildHookInterface):
    def dependencies(self) -> list[str]:
        """JupyterLab (jlpm, the extension builder: some 90 packages, minutes to install) only when the
        extension must be built."""
        sources = Path(self.root) / EXTENSION_SOURCES
        if sources.is_dir() and not cached_build(sources).is_dir():
            return [BUILDER_REQUIREMENT]
        return []

    def initialize(self, version: str, build_data: dict) -> None:
        self._fill_cache = None
        if self.target_name in ("wheel", "sdist"):
            self._fill_cache = built_extension_from_cache(Path(self.root))
        if self.target_name == "wheel":
            self._compile_numbering(version, build_data)

    def finalize(self, version: str, build_data: dict, artifact_path: str) -> None:
        if self._fill_cache is not None:
            self._fill_cache()

    def _compile_numbering(self, version: str, build_data: dict) -> None:
        try:
            built = build_in_place(Path(self.root))
        except Exception as exc:  # noqa: BLE001 - no compiler, no headers: the Python numbering serves
            print(f"toolkernel: read_file's C numbering was not built ({type(exc).__name__}: {exc});"
                  " read_file numbers lines in Python instead", file=sys.stderr)
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        if version != "editable":  # an editable install imports it from the checkout
            build_data["force_include"][str(built)] = str(built.relative_to(self.root))


def build_in_place(root: Path) -> Path:
    """Compile the module next to its source; its path."""
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    extension = Extension(MODULE, [SOURCE])  # with the flags Python was built with (-O3 on CPython)
    previous = os.getcwd()
    os.chdir(root)  # setuptools names sources and the in-place target from here
    try:
        with tempfile.TemporaryDirectory() as temp:
            command = build_ext(Distribution({"name": "toolkernel", "ext_modules": [extension]}))
            command.inplace, command.build_temp, command.build_lib = True, temp, temp
            command.ensure_finalized()
            command.run()
            return root / command.get_ext_fullpath(MODULE)
    finally:
        os.chdir(previous)


def built_extension_from_cache(root: Path):
    """Put the cached build of labextension/'s current sources in place; when there is none, clear
    the tree's build so that the builder makes one, and return what fills the cache from it."""
    sources = root / EXTENSION_SOURCES
    if not sources.is_dir():  # an sdist's wheel: the extension came in the sdist
        return None
    built = root / BUILT_EXTENSION
    cached = cached_build(sources)
    if cached.is_dir():
        replace_tree(cached, built, staging_in=root / "build")
        print(f"toolkernel: the JupyterLab extension of these sources is copied from {cached}", file=sys.stderr)
        # The builder's hook runs next, in this process: an editable install, which `skip-if-exists`
        # does not skip, would build again, without jupyterlab (`dependencies` did not ask for it).
        os.environ["HATCH_JUPYTER_BUILDER_SKIP_NPM"] = "1"
        return None
    shutil.rmtree(built, ignore_errors=True)  # may be a build of other sources: built again below
    return lambda: store_in_cache(built, cached)


def cached_build(sources: Path) -> Path:
    """Where the build of `sources` is kept (a folder only when it is there whole: it is renamed in)."""
    return cache_root() / sources_hash(sources)


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "toolkernel" / "labextension"


def sources_hash(sources: Path) -> str:
    """sha256 over the path and bytes of every file the extension is built from."""
    digest = hashlib.sha256(f"toolkernel labextension cache {CACHE_FORMAT}\n".encode())
    for path in sorted(source_files(sources)):
        relative = path.relative_to(sources).as_posix().encode()
        content = path.read_bytes()
        digest.update(b"%d:%s%d:" % (len(relative), relative, len(content)) + content)
    return digest.hexdigest()


def source_files(folder: Path):
    for entry in folder.iterdir():
        if entry.name in NOT_SOURCES:
            continue
        if entry.is_dir() and not entry.is_symlink():
            yield from source_files(entry)
        else:
            yield entry


def replace_tree(source: Path, target: Path, staging_in: Path) -> None:
    """`target` becomes a copy of `source`, made in `staging_in` (on target's filesystem, and packaged
    by no target) and renamed into place: no half copy is ever in the package."""
    staging_in.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="toolkernel-labextension.", dir=staging_in))
    try:
        shutil.copytree(source, staging / "tree", symlinks=True)
        shutil.rmtree(target, ignore_errors=True)
        os.rename(staging / "tree", target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def store_in_cache(built: Path, cached: Path) -> None:
    """Keep a fresh build for the next install (a cache that cannot be written only costs time)."""
    if not (built / "package.json").is_file():
        return
    try:
        cached.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        staging = Path(tempfile.mkdtemp(prefix=".incoming.", dir=cached.parent))
        try:
            shutil.copytree(built, staging / "tree", symlinks=True)
            os.rename(staging / "tree", cached)  # whole or not at all; a racing install's copy wins
        except OSError:
            if not cached.is_dir():
                raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    except OSError as exc:
        print(f"toolkernel: the built JupyterLab extension was not cached ({exc})", file=sys.stderr)
