"""The journal never records itself; what it leaves out by default; `[rewind] enabled = false`
(`_journal/_ignore.py`, issue 44 item 3)."""

from __future__ import annotations


import pytest

from kernel_helpers import RecordingSink, project_with

from toolkernel._config._config import load_config
from toolkernel._config._rewind import RewindLimits
from toolkernel._journal import Journal, describe_runs, iter_changes, rewind
from toolkernel._journal._ignore import Ignores
from toolkernel._journal._scan import walk


def test_lab_started_in_home_records_neither_the_journal_nor_what_the_kernel_writes(tmp_path, monkeypatch):
    # The setting: the workspace is the home folder, so the journal (~/.local/state), the
    # caches (~/.cache) and the kernel's own files (~/.ipython, ~/.local/share/jupyter) are in it.
    from toolkernel._session import Session

    home = project_with(tmp_path, monkeypatch, '[policy]\nmode = "accept-edits"\n')
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    (home / "data" / "d1").mkdir(parents=True)
    for i in range(3):
        (home / "data" / "d1" / f"f{i}.csv").write_text(f"row {i}\n")
    session = Session(home)
    try:
        assert session.journal.root.is_relative_to(home / ".local" / "state")
        sink = RecordingSink()
        first = session.run_script("rm -rf data/d1", sink)
        assert first.exit_code == 0, sink.stderr_text
        # What a kernel, pip and a shell write meanwhile (a script may not make these protected names).
        for path, text in ((".cache/pip/x.whl", "wheel"), (".ipython/profile_default/history.sqlite", "db"),
                           (".local/share/jupyter/runtime/kernel-1.json", "{}"), (".bash_history", "hist")):
            (home / path).parent.mkdir(parents=True, exist_ok=True)
            (home / path).write_text(text)
        second = session.run_script("echo more > notes.txt", RecordingSink())  # stores, writes its run file
        listed = describe_runs(iter_changes(session.journal))
        recorded = {e.path for run in session.journal.runs() for e in run.entries}
        assert recorded == {"data/d1/f0.csv", "data/d1/f1.csv", "data/d1/f2.csv", "data/d1", "notes.txt"}, listed
        rewind(session.journal, second.changes["run"])
        rewind(session.journal, first.changes["run"])  # not refused as "changed since" by the journal's own files
        assert sorted(p.name for p in (home / "data" / "d1").iterdir()) == ["f0.csv", "f1.csv", "f2.csv"]
    finally:
        session.close()


def test_the_xdg_folders_and_the_kernels_own_are_never_recorded_wherever_they_lie(tmp_path):
    ws = tmp_path / "ws"
    (ws / "st").mkdir(parents=True)
    environ = {"HOME": str(tmp_path / "elsewhere"), "XDG_STATE_HOME": str(ws / "st"),
               "XDG_CACHE_HOME": str(ws / "c"), "IPYTHONDIR": str(ws / "ip"), "CONDA_PKGS_DIRS": f"{ws / 'pk'},/x"}
    ignores = Ignores(str(ws), RewindLimits(default_ignores=False), environ)
    for path in ("st/toolkernel/journal/x/runs/r.jsonl", "c/pip/w.whl", "ip/history.sqlite", "pk/numpy/a.so",
                 ".toolkernel/outputs/o.txt", "tool-images/a.png", ".git/index", "sub/.ipynb_checkpoints/a.ipynb",
                 ".jupyter_ystore.db-journal"):
        assert ignores.left_out(path), path
    assert not ignores.left_out("stuff/c/pip.txt") and not ignores.left_out("data.csv")


def test_virtual_environments_and_caches_are_left_out_by_default_and_a_persons_config_records_them(tmp_path):
    ws = tmp_path / "ws"
    for folder in ("env/lib", "node_modules/x", "src/__pycache__", "data"):
        (ws / folder).mkdir(parents=True)
    (ws / "env" / "pyvenv.cfg").write_text("home = /usr\n")
    for path in ("env/lib/site.py", "node_modules/x/i.js", "src/__pycache__/m.pyc", "src/m.py", "data/a.csv"):
        (ws / path).write_text("x")
    environ = {"HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(tmp_path / "st")}
    by_default = walk(str(ws), Ignores(str(ws), RewindLimits(), environ))
    assert sorted(by_default) == ["data/a.csv", "src/m.py"]
    everything = walk(str(ws), Ignores(str(ws), RewindLimits(default_ignores=False), environ))
    assert {"env/lib/site.py", "node_modules/x/i.js", "src/__pycache__/m.pyc"} <= set(everything)
    globbed = Ignores(str(ws), RewindLimits(ignore=("data/**",)), environ)
    assert globbed.folder_left_out("data") and globbed.left_out("data/a.csv") and not globbed.left_out("src/m.py")
    some = Ignores(str(ws), RewindLimits(ignore=("data/*.tmp",)), environ)
    assert not some.folder_left_out("data") and some.left_out("data/a.tmp") and not some.left_out("data/a.csv")


def test_enabled_false_counts_only_in_the_persons_own_config(tmp_path, monkeypatch):
    from toolkernel._session import Session

    project = project_with(tmp_path, monkeypatch, '[rewind]\nenabled = false\n')
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    with pytest.raises(Exception, match="rewind.enabled.*counts only in your own config"):
        load_config(project)
    (project / "toolkernel.toml").write_text('[policy]\nmode = "accept-edits"\n')
    user = tmp_path / "xdg" / "toolkernel"
    user.mkdir(parents=True)
    (user / "toolkernel.toml").write_text("[rewind]\nenabled = false\n")
    assert load_config(project).rewind.enabled is False
    (project / "f.txt").write_text("before\n")
    session = Session(project)
    try:
        result = session.run_script("echo after > f.txt", RecordingSink())
        assert result.exit_code == 0 and result.changes is None and session.journal.runs() == []
    finally:
        session.close()
    assert not Journal(project).root.exists()
