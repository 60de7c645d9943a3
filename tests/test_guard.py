"""No script may change toolkernel's own configuration or approvals."""

import json
import sys

import pytest

from kernel_helpers import RecordingSink
from toolkernel._session import Session

SERVER = f"""
[mcp_servers.github]
command = {sys.executable!r}
args = ["-m", "toolkernel.demo_server"]
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TOOLKERNEL_ADMIN_CONFIG", str(tmp_path / "no-admin.toml"))
    work = tmp_path / "work"
    (work / ".toolkernel").mkdir(parents=True)
    (work / "toolkernel.toml").write_text(SERVER)
    session = Session(work)
    yield work, session
    session.close()


def run(session, script):
    sink = RecordingSink()
    result = session.run_script(script, sink)
    return result, "".join(sink.err)


def test_a_script_cannot_write_the_approvals(project):
    work, session = project
    grant = json.dumps({"version": 1, "allow": ["mcp_github__delete_branch"]})
    result, err = run(session, f"echo '{grant}' > .toolkernel/approvals.json")
    assert result.exit_code != 0 and "readonly" in err
    assert not (work / ".toolkernel" / "approvals.json").exists()
    stopped = run(session, "tools github delete-branch branch=fix-x")[0].report["tools"]["stopped"]
    assert stopped["reason"] == "needs_approval"


@pytest.mark.parametrize("name", ["toolkernel.toml", ".mcp.json"])
def test_a_config_change_by_a_script_is_undone_and_kept_aside(project, name):
    work, session = project
    before = (work / name).read_bytes() if (work / name).exists() else None
    loosen = '[policy]\\nmode = "bypass-permissions"\\n' if name == "toolkernel.toml" else '{"mcpServers": {}}'
    result, err = run(session, f"printf '{loosen}' >> {name}")
    assert result.exit_code == 0
    assert f"the script changed {name}" in err
    now = (work / name).read_bytes() if (work / name).exists() else None
    assert now == before
    kept = list((work / ".toolkernel" / "rejected").iterdir())
    assert len(kept) == 1 and kept[0].name.startswith(name)
    stopped = run(session, "tools github delete-branch branch=fix-x")[0].report["tools"]["stopped"]
    assert stopped["reason"] == "needs_approval"


def test_own_tools_ask_before_writing_protected_files_even_in_bypass_mode(project):
    work, session = project
    (work / "toolkernel.toml").write_text(SERVER + '\n[policy]\nmode = "bypass-permissions"\n')
    for path in ("toolkernel.toml", ".mcp.json", ".toolkernel/approvals.json"):
        result, err = run(session, f"tools write-file path={path} content=x")
        assert result.report["tools"]["stopped"]["reason"] == "needs_approval", path
        assert "own configuration" in err
    assert run(session, "tools write-file path=notes.txt content=x")[0].exit_code == 0
    assert run(session, "tools read-file path=toolkernel.toml")[0].exit_code == 0


def test_a_deny_rule_in_another_case_still_denies(project):
    work, session = project
    (work / "toolkernel.toml").write_text(
        SERVER + '\n[policy]\nmode = "bypass-permissions"\ndeny = ["mcp_GitHub__Delete_Branch"]\n')
    result, err = run(session, "tools github delete-branch branch=fix-x")
    assert result.exit_code == 1 and '"denied"' in err
