"""Build hook: read_file's numbering in C (toolkernel/_providers/_tools/_numbering.c), compiled
into the package where a C compiler is at hand.

It is only faster than the Python numbering beside it (files.py), which the package uses where
the compile fails: `pip install .` works on a machine without a compiler, and says so. The
module is built in place, next to its source, as the JupyterLab extension is, so that a checkout
the tests run from has it too; the wheel then takes it, and is tagged for this platform.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

MODULE = "toolkernel._providers._tools._numbering"
SOURCE = "toolkernel/_providers/_tools/_numbering.c"


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel":
            return
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
