"""toolkernel's own imports never come from the working directory (toolkernel/_imports.py).
A real Python in a folder a script wrote to, with the working directory first on sys.path as
in a kernel, and a real Bashkit run."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.slow
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


GRAMMAR_PROBE = """
import importlib, json, sys, time
import toolkernel
from toolkernel import _imports
import jsonschema
seen = {"built": "rfc3987_syntax.syntax_helpers" in sys.modules}
if sys.argv[1] == "submodule":  # a person's code asking for the grammar's module itself, before any check
    from rfc3987_syntax.syntax_helpers import is_valid_syntax
    seen["submodule"] = is_valid_syntax("iri", "http://example.com/ä")
checker = jsonschema.FormatChecker()
seen["checks"] = [checker.conforms("http://example.com/ä", "iri"), checker.conforms("not an iri ::", "iri")]
import rfc3987_syntax
seen["real"] = rfc3987_syntax.__file__.endswith("__init__.py") and hasattr(rfc3987_syntax, "syntax_helpers")
print(json.dumps(seen))
"""


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("rfc3987_syntax") is None, reason="rfc3987_syntax is not installed")
@pytest.mark.parametrize("way", ["check", "submodule"])
def test_jsonschema_imported_after_toolkernel_builds_no_grammar_until_a_format_check_needs_it(tmp_path, way):
    done = subprocess.run([sys.executable, "-c", GRAMMAR_PROBE, way], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env=_env_with_repo())
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["built"] is False  # jsonschema's import left the grammar alone
    assert seen["checks"] == [True, False]  # and its "iri" check still works, the grammar built for it
    assert seen["real"] is True
    if way == "submodule":
        assert seen["submodule"] is True


def _env_with_repo() -> dict[str, str]:
    repo = str(Path(__file__).resolve().parent.parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}


def test_serve_starts_without_the_kernel_clients_it_needs_only_to_pair_a_kernel():
    # `serve` is started for each agent session; jupyter_client and zmq are imported when a
    # notebook is first paired with a kernel over ZMQ (`_pairing.pair`), not at every start.
    probe = ("import sys, toolkernel._frontends._serve\n"
             "print(sorted(m for m in ('jupyter_client', 'zmq') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], env=_env_with_repo(), capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.split() == ["[]"], done.stdout
