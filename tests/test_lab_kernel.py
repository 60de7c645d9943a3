"""The kernel side of the JupyterLab extension, through real kernels: the kernelspec,
the before-start question bundle, the report's "Always allow" offer and the sidebar's comm."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from approval_helpers import (REPORT_MIME, WAIT, Kernel, demo_server_section, kernel_env, policy_section,
                              write_project)
from ipykernel.kernelspec import get_kernel_dict
from jupyter_client import KernelManager

from toolkernel._approval._approvals import lasting_rule_covers
from toolkernel._frontends._lab import APPROVAL_MIME
from toolkernel._approval._policy import CallInfo, Policy

REPO = Path(__file__).resolve().parent.parent
TARGET = "toolkernel.approval"
DELETE = {"tool": "tools github delete-branch", "input": {"branch": "fix-x"}}
# Built at run time, so the script starts and stops at the call.
DELETE_MID_RUN = '%%tools\nfor b in fix-x; do tools github delete-branch "branch=$b"; done\n'


@pytest.fixture
def kernel(tmp_path):
    workdir = write_project(tmp_path / "project", demo_server_section()).parent
    started = Kernel(workdir, kernel_env(workdir))
    yield started
    started.close()


def run_capturing(kernel: Kernel, code: str, *, answer: str | None = None) -> list[dict]:
    """Run a cell; return its display_data contents (data and metadata). With `answer`,
    stdin is offered and each input request is answered with it."""
    displays: list[dict] = []
    client = kernel.client

    def on_output(msg):
        if msg["msg_type"] == "display_data":
            displays.append(msg["content"])

    client.execute_interactive(code, output_hook=on_output, timeout=WAIT, allow_stdin=answer is not None,
                               stdin_hook=lambda msg: client.input(answer))
    return displays


# -- the kernelspec ----------------------------------------------------------------


@pytest.mark.slow
def test_install_kernel_makes_a_kernel_that_runs_tools_cells_without_load_ext(tmp_path):
    prefix = tmp_path / "prefix"
    env = {**os.environ, "PYTHONPATH": str(REPO), "JUPYTER_PATH": str(prefix / "share" / "jupyter")}
    installed = subprocess.run([sys.executable, "-m", "toolkernel", "install-kernel", "--prefix", str(prefix)],
                               capture_output=True, text=True, env=env, timeout=WAIT)
    assert installed.returncode == 0, installed.stderr
    listed = subprocess.run([sys.executable, "-m", "jupyter_client.kernelspecapp", "list", "--json"],
                            capture_output=True, text=True, env=env, timeout=WAIT)
    spec = json.loads(listed.stdout)["kernelspecs"]["toolkernel"]
    assert spec["spec"]["display_name"] == "Python 3 (toolkernel)"
    # ipykernel's own word on it: with `supported_encryption`, a manager may encrypt its channels.
    assert spec["spec"]["metadata"] == get_kernel_dict()["metadata"]

    workdir = write_project(tmp_path / "project", demo_server_section()).parent
    # What a script of an earlier run may have left in the kernel's folder under the names the
    # start imports: the kernelspec's `-P` start looks there for neither.
    plant = "import pathlib; pathlib.Path('pwned').write_text('x')\n"
    (workdir / "ipykernel_launcher.py").write_text(plant)
    (workdir / "toolkernel").mkdir()
    (workdir / "toolkernel" / "__init__.py").write_text(plant)
    manager = KernelManager(kernel_name="toolkernel")
    manager.kernel_spec_manager.kernel_dirs = [str(prefix / "share" / "jupyter" / "kernels")]
    manager.start_kernel(cwd=str(workdir), env={**kernel_env(workdir), "PYTHONPATH": str(REPO)})
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=WAIT)
        out: list[str] = []
        reply = client.execute_interactive(
            "%%tools\ntools github list-pulls repo=acme/api | jq -r '.[0].number'\n", timeout=WAIT,
            output_hook=lambda m: out.append(m["content"].get("text", "")) if m["msg_type"] == "stream" else None)
        assert reply["content"]["status"] == "ok", out
        assert "".join(out).strip().isdigit(), out
        assert not (workdir / "pwned").exists()
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


# -- "Always allow" only when a lasting rule would cover the call ----------------------------


def write_call(**extra) -> CallInfo:
    return CallInfo("write_file", "tools write-file", {"path": "a.txt", "content": "x"}, "edit", **extra)


@pytest.mark.parametrize("policy, call, offered", [
    (Policy(), write_call(), True),
    (Policy(ask=("write_file",)), write_call(), False),
    (Policy(), write_call(outside_workspace=True), False),
    (Policy(), write_call(protected=True), False),
    (Policy(ask=("write_file(path=secret*)",)), write_call(), True),
])
def test_always_allow_is_offered_only_when_a_lasting_rule_would_cover_the_call(policy, call, offered):
    assert lasting_rule_covers(policy, call) is offered


@pytest.mark.slow
def test_the_report_says_in_its_metadata_whether_always_allow_is_offered(tmp_path):
    workdir = write_project(tmp_path / "asks", demo_server_section(),
                            policy_section(ask=["mcp_github__delete_branch"])).parent
    asking = Kernel(workdir, kernel_env(workdir))
    try:
        [bundle] = [d for d in run_capturing(asking, DELETE_MID_RUN) if REPORT_MIME in d["data"]]
        assert bundle["data"][REPORT_MIME]["tools"]["stopped"]["call"] == DELETE
        assert bundle["metadata"][REPORT_MIME] == {"always_offered": False}
    finally:
        asking.close()


# -- before the start: the question the buttons answer ----------------------------------


def test_before_the_start_the_question_is_shown_as_a_bundle_then_the_prompt_answer_runs_the_script(kernel):
    displays = run_capturing(kernel, "%%tools\ntools github delete-branch branch=fix-x\n", answer="o")
    [question] = [d["data"] for d in displays if APPROVAL_MIME in d["data"]]
    assert question[APPROVAL_MIME] == {"call": DELETE, "always_offered": True,
                                       "keys": {"once": "o", "always": "a", "deny": "d"}}
    assert "delete-branch" in question["text/plain"] and "delete-branch" in question["text/html"]
    assert not [d for d in displays if REPORT_MIME in d["data"]], "the script ran after the answer"


def test_without_stdin_no_question_is_shown_and_the_report_offers_always(kernel):
    displays = run_capturing(kernel, "%%tools\ntools github delete-branch branch=fix-x\n")
    assert not [d for d in displays if APPROVAL_MIME in d["data"]]
    [report] = [d for d in displays if REPORT_MIME in d["data"]]
    assert report["metadata"][REPORT_MIME] == {"always_offered": True}


# -- the sidebar's requests ---------------------------------------------------------------


def test_the_sidebar_sees_servers_tools_schemas_search_and_revokes_a_lasting_approval(kernel):
    overview = kernel.comm_request(TARGET, {"action": "overview"})
    assert overview["ok"], overview
    [github] = overview["servers"]
    assert github["name"] == "github" and github["state"] == "running" and github["error"] is None
    delete = next(t for t in github["tools"] if t["command"] == "tools github delete-branch")
    assert "branch" in delete["schema"]["properties"]
    assert "tools read-file" in [t["command"] for t in overview["own_tools"]]
    assert overview["approvals"] == []

    found = kernel.comm_request(TARGET, {"action": "search", "words": "pull request"})
    assert found["ok"] and "list-pulls" in found["text"], found

    run_capturing(kernel, DELETE_MID_RUN)
    always = kernel.comm_request(TARGET, {"action": "always", "call": DELETE})
    assert always["ok"], always
    listed = kernel.comm_request(TARGET, {"action": "overview"})["approvals"]
    assert [a["rule"] for a in listed] == ["mcp_github__delete_branch"]
    assert json.loads((kernel.workdir / ".toolkernel" / "approvals.json").read_text())["allow"][0]["rule"] \
        == "mcp_github__delete_branch"

    revoked = kernel.comm_request(TARGET, {"action": "revoke", "rule": "mcp_github__delete_branch"})
    assert revoked["ok"], revoked
    assert kernel.comm_request(TARGET, {"action": "overview"})["approvals"] == []
    again = kernel.comm_request(TARGET, {"action": "revoke", "rule": "mcp_github__delete_branch"})
    assert again["ok"] and again["message"].startswith("nothing to revoke: no lasting approval")


@pytest.mark.slow
def test_the_sidebar_shows_a_failed_server_with_its_error_and_an_on_demand_one_not_loaded(tmp_path):
    workdir = write_project(
        tmp_path / "mixed", demo_server_section(),
        '[mcp_servers.broken]\ncommand = "/nonexistent/server"\n',
        f'[mcp_servers.later]\ncommand = {json.dumps(sys.executable)}\nargs = ["-m", "toolkernel.demo_server"]\n'
        'load = "on-demand"\n').parent
    mixed = Kernel(workdir, kernel_env(workdir))
    try:
        servers = {s["name"]: s for s in mixed.comm_request(TARGET, {"action": "overview"})["servers"]}
        assert servers["broken"]["state"] == "failed" and servers["broken"]["error"]
        assert servers["later"]["state"] == "not loaded" and servers["later"]["tools"] == []
        assert servers["github"]["state"] == "running"
    finally:
        mixed.close()


# -- the sidebar's "Changes" ---------------------------------------------------------------


def test_the_sidebar_lists_a_cells_changes_shows_a_diff_and_rewinds_as_tools_rewind_does(tmp_path):
    workdir = write_project(tmp_path / "changes", policy_section("accept-edits")).parent
    (workdir / "table.csv").write_text("a,b\n1,2\n")
    (workdir / "link.csv").write_text("x\n")
    kernel = Kernel(workdir, kernel_env(workdir, XDG_STATE_HOME=str(tmp_path / "state")))
    try:
        cell = kernel.run("%%tools\ntools write-file --path table.csv --content 'a,b\n3,4\n'\n"
                          "tools write-file --path '<b>new</b>.txt' --content hi\nrm link.csv")
        assert cell.ok, cell
        [run] = kernel.comm_request(TARGET, {"action": "changes"})["runs"]
        assert run["route"] == "cell" and run["ended"] and run["time"][:2] == "20"
        kinds = {f["path"]: f["kind"] for f in run["files"]}
        assert kinds == {"table.csv": "changed", "<b>new</b>.txt": "created", "link.csv": "deleted",
                         "<b>new<": "created"}  # the folder its name made

        diff = kernel.comm_request(TARGET, {"action": "diff", "run": run["id"], "path": "table.csv"})
        assert diff["ok"] and "-1,2\n+3,4\n" in diff["diff"] and "changed again" not in diff["diff"], diff
        created = kernel.comm_request(TARGET, {"action": "diff", "run": run["id"], "path": "<b>new</b>.txt"})
        assert "+hi" in created["diff"]
        # A link left where a deleted file was is not followed: the file it names is not shown.
        (workdir / "link.csv").symlink_to(tmp_path / "secret")
        (tmp_path / "secret").write_text("a private key\n")
        linked = kernel.comm_request(TARGET, {"action": "diff", "run": run["id"], "path": "link.csv"})
        assert "not a regular file now: a link" in linked["diff"] and "private" not in linked["diff"]
        unknown = kernel.comm_request(TARGET, {"action": "diff", "run": run["id"], "path": "elsewhere"})
        assert unknown["ok"] is False and "did not change elsewhere" in unknown["message"]

        (workdir / "link.csv").unlink()

        done = kernel.comm_request(TARGET, {"action": "rewind", "run": run["id"]})
        assert done["ok"] and f"rewound run {run['id']}" in done["message"], done
        assert (workdir / "table.csv").read_text() == "a,b\n1,2\n" and (workdir / "link.csv").read_text() == "x\n"
        assert not (workdir / "<b>new</b>.txt").exists()

        # Changed since: refused with `%tools rewind`'s own message, and nothing touched.
        assert kernel.run("%%tools\ntools write-file --path table.csv --content again").ok
        runs = kernel.comm_request(TARGET, {"action": "changes"})["runs"]
        assert len(runs) == 3 and runs[-1]["id"] == run["id"] and runs[1]["route"] == "rewind"  # newest first
        (workdir / "table.csv").write_text("the person's edit\n")
        changed = kernel.comm_request(TARGET, {"action": "diff", "run": runs[0]["id"], "path": "table.csv"})
        assert "changed again since run" in changed["diff"]
        refused = kernel.comm_request(TARGET, {"action": "rewind", "run": runs[0]["id"]})
        said = kernel.run(f"%tools rewind {runs[0]['id']}")
        assert refused["ok"] is False and refused["message"] in said.stderr + json.dumps(said.error), (refused, said)
        assert "changed since run" in refused["message"] and "table.csv" in refused["message"]
        assert (workdir / "table.csv").read_text() == "the person's edit\n"
        assert kernel.comm_request(TARGET, {"action": "rewind", "run": ""})["ok"] is False
    finally:
        kernel.close()
