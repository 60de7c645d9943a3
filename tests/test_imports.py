"""toolkernel's own imports never come from the working directory (toolkernel/_imports.py).
A real Python in a folder a script wrote to, with the working directory first on sys.path as
in a kernel, and a real Bashkit run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kernel_helpers import isolated_env

PLANT = "import pathlib; pathlib.Path('pwned').write_text('x')\n"

PROBE = """
import json, sys
sys.path.insert(0, "")  # as a kernel has it
from toolkernel._session import Session
from kernel_helpers import RecordingSink
import toolkernel

@toolkernel.tool("helper", description="imports a module of the folder", kind="read", input_schema={"type": "object"})
def helper(arguments, ctx):
    import person_helper
    return person_helper.VALUE

session = Session()
session.register_tools([helper])
sink = RecordingSink()
result = session.run_script(open("script.sh").read(), sink)
print(json.dumps([result.exit_code, sink.stdout_text, sink.stderr_text]))
session.close()
"""
# A script plants a package toolkernel imports only when the tool first runs, then calls it.
SCRIPT = f"""mkdir nbformat
printf "{PLANT.strip()}\\n" > nbformat/__init__.py
tools notebook-read "$(echo notebook_path=a.ipynb)"
tools helper
"""


def test_a_package_a_script_plants_in_the_working_directory_is_not_what_toolkernel_imports(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.ipynb").write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}))
    (work / "person_helper.py").write_text("VALUE = 'the helper beside the notebook'\n")
    (work / "script.sh").write_text(SCRIPT)
    tests = Path(__file__).parent
    env = {**isolated_env(tmp_path), "PYTHONPATH": f"{tests.parent}:{tests}", "TOOLKERNEL_TRUST_ALL": "1",
           "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=work, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    code, out, err = json.loads(done.stdout.strip().splitlines()[-1])
    assert not (work / "pwned").exists(), err
    # It was there for the whole run (and moved aside at its end: it shadows the installed one).
    assert list(work.glob(".toolkernel/quarantine/*/nbformat/__init__.py")) and code != 0, err
    assert "a.ipynb: 0 cells" in out and "the helper beside the notebook" in out, err
