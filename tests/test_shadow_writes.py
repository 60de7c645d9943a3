"""A direct write (`write-file`, `edit-file`, `notebook-edit`, any tool with path keys that may
write) that would leave a module at the workspace's top in place of an installed one asks a
person, whatever the mode (see toolkernel/_shadowing.py and `_policy._shadowing`).

What "would shadow" means is checked against a real Python started in the folder
(`imported_from`), so it is importlib's answer, not this module's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_helpers import isolated_env, write_config
from toolkernel import NeedsApproval, tool
from toolkernel._approval._policy import CallInfo, Policy, decide
from toolkernel._frontends._direct import call_argv
from toolkernel._session import Session
from toolkernel._shadowing import Shadow, installed, shadow_of_write

pytestmark = pytest.mark.timeout(300)

# Installed wherever toolkernel runs: json in the standard library, jsonschema a dependency.
PACKAGE = "jsonschema"
WHY = "`json.py` at the workspace top would shadow the installed module `json`"


# -- the policy: pure ------------------------------------------------------------------------


def write(path: str = "json.py", shadows: bool = True) -> CallInfo:
    found = (Shadow("path", path, "json"),) if shadows else ()
    return CallInfo("write_file", "tools write-file", {"path": path, "content": "x"}, "edit", shadows=found,
                    path_forms={"path": (path, f"/work/{path}")})


@pytest.mark.parametrize("mode", ["default", "accept-edits", "bypass-permissions"])
def test_a_shadowing_write_asks_in_every_mode_and_says_why(mode):
    decision = decide(write(), Policy(mode=mode, allow=("write_file", "*")))
    assert decision.action == "ask" and decision.reason.startswith(WHY)
    assert decide(write(shadows=False), Policy(mode=mode)).action == ("ask" if mode == "default" else "allow")


def test_plan_and_deny_rules_still_deny_it():
    assert decide(write(), Policy(mode="plan")).action == "deny"
    assert decide(write(), Policy(mode="bypass-permissions", deny=("write_file",))).action == "deny"


def test_only_an_allow_rule_naming_that_very_path_lifts_it():
    lifting = Policy(mode="accept-edits", allow=("write_file(path=json.py)",))
    assert decide(write(), lifting).action == "allow"
    for rule in ("write_file(path=*.py)", "write_file(path=json*)", "write_file(content=x)", "write_file"):
        assert decide(write(), Policy(mode="accept-edits", allow=(rule,))).action == "ask", rule
    # An exact rule for another path lifts nothing here.
    assert decide(write(), Policy(mode="accept-edits", allow=("write_file(path=csv.py)",))).action == "ask"


# -- what shadows: importlib's answer --------------------------------------------------------


def imported_from(work: Path, module: str, path: list[str] = ()) -> str | None:
    """Where a Python started in `work` finds `module` (its working directory first, as a kernel)."""
    code = (f"import importlib.util; spec = importlib.util.find_spec({module!r});"
            " print(spec and (spec.origin or list(spec.submodule_search_locations)[0]))")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSAFEPATH", "PYTHONPATH")}
    if path:
        env["PYTHONPATH"] = os.pathsep.join(path)
    found = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True,
                           check=True)
    return found.stdout.strip()


@pytest.fixture
def work(tmp_path, monkeypatch):
    for key, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


CASES = [
    # the written file, what was there before it, the module, whether it shadows
    ("json.py", (), "json", True),
    ("json.pyc", (), "json", True),
    (f"json{__import__('importlib.machinery').machinery.EXTENSION_SUFFIXES[0]}", (), "json", True),
    (f"{PACKAGE}/__init__.py", (), PACKAGE, True),
    (f"{PACKAGE}/helpers.py", (), PACKAGE, False),  # a bare folder: the installed package still wins
    (f"{PACKAGE}/helpers.py", (f"{PACKAGE}/__init__.py",), PACKAGE, False),  # in the person's package
    ("notes_of_mine.py", (), "notes_of_mine", False),  # nothing installed of that name
    ("sub/json.py", (), "json", False),  # not at the top
    ("json.pth", (), "json", False),  # `site` reads .pth files in site-packages only
]


@pytest.mark.parametrize("name, before, module, shadows", CASES)
def test_what_a_write_would_shadow_is_what_python_imports(work, name, before, module, shadows):
    for entry in before:
        (work / entry).parent.mkdir(parents=True, exist_ok=True)
        (work / entry).write_text("")
    root = os.path.realpath(work)
    found = shadow_of_write("path", os.path.join(root, name), root, installed(root))
    assert (found is not None) == shadows and (found is None or found.module == module)
    if before:
        return  # the person's package is at the top already: what it shadows, it shadowed before
    was = imported_from(work, module)
    (work / name).parent.mkdir(parents=True, exist_ok=True)
    (work / name).write_bytes(b"")
    now = imported_from(work, module)
    assert (was != "None" and not was.startswith(str(work)) and now.startswith(str(work))) == shadows


def test_a_bare_folder_joining_an_installed_namespace_package_shadows(work, tmp_path, monkeypatch):
    outside = tmp_path / "site"
    (outside / "space" / "real").mkdir(parents=True)
    (outside / "space" / "real" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(outside))
    root = os.path.realpath(work)
    found = shadow_of_write("path", os.path.join(root, "space", "sub", "__init__.py"), root, installed(root))
    assert found == Shadow("path", "space/", "space")
    (work / "space" / "sub").mkdir(parents=True)
    (work / "space" / "sub" / "__init__.py").write_text("")
    assert imported_from(work, "space.sub", [str(outside)]).startswith(str(work))


def test_anything_in_the_tops_bytecode_cache_counts(work):
    root = os.path.realpath(work)
    found = shadow_of_write("path", os.path.join(root, "__pycache__", "helpers.cpython-311.pyc"), root,
                            installed(root))
    assert found is not None and found.module == "" and "bytecode cache" in found.reason
    assert shadow_of_write("path", os.path.join(root, "pkg", "__pycache__", "x.pyc"), root, installed(root)) is None


# -- direct calls: toolkernel.call, %tools -----------------------------------------------------


@tool("save-as", description="Write a file (a test tool with a path key).", kind="edit", path_keys=("target",),
      input_schema={"type": "object", "properties": {"target": {"type": "string"}}, "required": ["target"]})
def save_as(arguments, ctx):
    ctx.real(arguments, "target").parent.mkdir(exist_ok=True)
    ctx.real(arguments, "target").write_text("saved")
    return "saved"


def session_in(work: Path, mode: str) -> Session:
    write_config(work, f'[policy]\nmode = "{mode}"\n')
    opened = Session(work)
    opened.register_tools([save_as])
    return opened


@pytest.mark.parametrize("mode", ["accept-edits", "bypass-permissions"])
def test_a_direct_write_of_a_shadowing_module_needs_a_person(work, mode):
    session = session_in(work, mode)
    try:
        with pytest.raises(NeedsApproval, match="json.py` at the workspace top would shadow the installed"):
            call_argv(session, ["write-file", "path=json.py", "content=import os"])
        with pytest.raises(NeedsApproval, match=f"{PACKAGE}/__init__.py"):
            call_argv(session, ["write-file", f"path={PACKAGE}/__init__.py", "content=x"])
        with pytest.raises(NeedsApproval, match="json"):  # any tool whose path key may write
            call_argv(session, ["save-as", "target=json.py"])
        (work / "csv.py").write_text("a = 1\n")  # the person's own, already there: an edit asks too
        with pytest.raises(NeedsApproval, match="csv"):
            call_argv(session, ["edit-file", "path=csv.py", "old_string=a = 1", "new_string=a = 2"])
        assert not (work / "json.py").exists() and not (work / PACKAGE).exists()
        assert (work / "csv.py").read_text() == "a = 1\n"
        # What shadows nothing is written as the mode says, unasked.
        call_argv(session, ["write-file", "path=notes_of_mine.py", "content=x"])
        call_argv(session, ["save-as", "target=sub/json.py"])
        assert (work / "notes_of_mine.py").read_text() == "x" and (work / "sub" / "json.py").exists()
    finally:
        session.close()


def test_a_link_leading_to_the_top_is_judged_where_it_leads(work):
    session = session_in(work, "accept-edits")
    try:
        (work / "sub").mkdir()
        (work / "sub" / "up").symlink_to("..")
        with pytest.raises(NeedsApproval, match="json.py"):
            call_argv(session, ["write-file", "path=sub/up/json.py", "content=x"])
        with pytest.raises(NeedsApproval, match="json.py"):
            call_argv(session, ["write-file", "path=sub/../json.py", "content=x"])
        assert not (work / "json.py").exists()
    finally:
        session.close()


def test_a_person_answering_once_lets_the_write_through_and_always_would_not(work):
    session = session_in(work, "accept-edits")
    try:
        questions: list[str] = []

        def ask(prompt: str) -> str:
            questions.append(prompt)
            return "o"

        call_argv(session, ["write-file", "path=json.py", "content=mine"], ask=ask)
        assert (work / "json.py").read_text() == "mine" and len(questions) == 1
        assert "would shadow the installed module `json`" in questions[0]
        # "always" adds `write_file`, which does not name the path: refused where the person answers later.
        with pytest.raises(NeedsApproval):
            call_argv(session, ["write-file", "path=json.py", "content=again"])
        from toolkernel._frontends._answers import AnswerError, approve

        with pytest.raises(AnswerError, match="always would not let this call run unasked"):
            approve(session, always=True)
        assert (work / "json.py").read_text() == "mine"
    finally:
        session.close()
