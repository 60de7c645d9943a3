"""Issue 48, item 5: `toolkernel doctor` (and `%tools doctor`) checks the whole setup, each line
that is not in order with what to do: the JupyterLab extension, the kernelspec, the config and its
trust, each server started, how changes are found, node for a source build, and the sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolkernel._frontends import _doctor
from toolkernel._frontends._answers import manage
from toolkernel._session import Session

REPO = Path(__file__).resolve().parent.parent


def _project(tmp_path: Path) -> Path:
    work = tmp_path / "project"
    work.mkdir()
    (work / "toolkernel.toml").write_text(
        f'[mcp_servers.github]\ncommand = {json.dumps(sys.executable)}\nargs = ["-m", "toolkernel.demo_server"]\n'
        '[mcp_servers.broken]\ncommand = "/nonexistent/server-binary"\n')
    return work


@pytest.fixture
def jupyter_dirs(tmp_path, monkeypatch):
    data, config = tmp_path / "jupyter-data", tmp_path / "jupyter-config"
    (data / "labextensions" / "toolkernel").mkdir(parents=True)
    (data / "labextensions" / "toolkernel" / "package.json").write_text('{"name": "toolkernel", "version": "9.9.9"}')
    (data / "kernels" / "toolkernel").mkdir(parents=True)
    (data / "kernels" / "toolkernel" / "kernel.json").write_text(json.dumps(
        {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
         "display_name": "Python 3 (toolkernel)", "language": "python"}))
    (config / "labconfig").mkdir(parents=True)
    monkeypatch.setenv("JUPYTER_PATH", str(data))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(config))
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(config))
    return data, config


@pytest.mark.slow  # starts the MCP servers it checks
def test_each_line_says_what_it_found_and_what_to_do(tmp_path, monkeypatch, jupyter_dirs):
    data, config = jupyter_dirs
    work = _project(tmp_path)
    monkeypatch.delenv("TOOLKERNEL_TRUST_ALL", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    report, passed = _doctor.doctor(work)
    assert not passed
    assert "[  ok] JupyterLab extension: toolkernel 9.9.9, enabled" in report
    assert "[  ok] kernelspec: 'Python 3 (toolkernel)' in" in report
    assert "[FAIL] trust: not trusted" in report and f"→ read its config, then toolkernel trust {work}" in report
    assert "[note] servers: none used: the config that may name some is not trusted" in report
    assert "OS sandbox for an agent's host code" in report  # the sandbox's own section, as it is
    # Trusted: each server is started; the one that does not start says so and what to do.
    monkeypatch.setenv("TOOLKERNEL_TRUST_ALL", "1")
    (config / "labconfig" / "page_config.json").write_text(json.dumps({"disabledExtensions": {"toolkernel": True}}))
    report, passed = _doctor.doctor(work)
    assert "[  ok] server github: starts, 4 tools" in report
    assert "[FAIL] server broken: does not start" in report and "→ run its command by hand" in report
    assert "[FAIL] JupyterLab extension: toolkernel 9.9.9 is installed but disabled" in report
    assert "→ jupyter labextension enable toolkernel" in report
    assert not passed
    assert "[  ok] changes:" in report, [line for line in report.splitlines() if "change" in line]


def test_without_node_or_the_extension_the_lines_say_how_to_get_them(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no node
    assert _doctor.node_line().state == _doctor.NOTE and "node 20" in _doctor.node_line().fix
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "nothing"))
    monkeypatch.setattr("jupyter_core.paths.jupyter_path", lambda *parts: [str(tmp_path / "nothing" / "labextensions")])
    line = _doctor.lab_extension()
    assert line.state == _doctor.FAIL and "not installed where JupyterLab looks" in line.said
    assert "pip install" in line.fix


@pytest.mark.slow  # a process of its own
def test_the_command_and_the_magic_run_the_same_checks(tmp_path):
    work = _project(tmp_path)
    (work / "toolkernel.toml").write_text("")  # no servers: a quick run
    done = subprocess.run([sys.executable, "-m", "toolkernel", "doctor", "--workdir", str(work)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "[  ok] config: reads without a problem" in done.stdout and "OS sandbox" in done.stdout, done.stderr
    assert done.returncode == (1 if "[FAIL]" in done.stdout else 0)
    session = Session(work)
    try:
        said = manage(session, ["doctor"])
    finally:
        session.close()
    assert "[  ok] config: reads without a problem" in said and "servers: none configured" in said


def test_a_config_that_does_not_parse_is_a_failing_line_not_a_traceback(tmp_path, jupyter_dirs):
    work = _project(tmp_path)
    (work / "toolkernel.toml").write_text("[mcp_servers.x\ncommand = ")  # as a person's typo leaves it
    report, passed = _doctor.doctor(work)
    assert not passed
    assert "[FAIL] config: 1 problem(s), the first:" in report and "invalid TOML at line 1" in report
    # The sandbox's section still shows, on the defaults, and says why.
    assert "OS sandbox for an agent's host code" in report
    assert "(the config has a problem (" in report and "the defaults below" in report
