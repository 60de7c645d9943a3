"""A tracked, unmodified file's prior content referenced from git's own objects, checked on read
(`_journal/_git.py`, issue 44 item 2)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time

import pytest

from kernel_helpers import project_with

from toolkernel._journal import RewindError, rewind

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="no git here")


def _git(root, *args):
    subprocess.run(["git", "-C", str(root), "-c", "user.email=t@e", "-c", "user.name=t", *args], check=True,
                   capture_output=True)


@pytest.fixture
def repository(tmp_path, monkeypatch):
    from toolkernel._session import Session

    project = project_with(tmp_path, monkeypatch, '[policy]\nmode = "accept-edits"\n')
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    (project / "src").mkdir()
    (project / "src" / "model.py").write_text("weights = 1\n")
    (project / "notes.md").write_text("tracked notes\n")
    _git(project, "init", "-q")
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "first")
    old = time.time() - 60  # the files older than git's index: not "racily clean"
    for path in ("src/model.py", "notes.md", "toolkernel.toml"):
        os.utime(project / path, (old, old))
    _git(project, "update-index", "--refresh")
    (project / "scratch.txt").write_text("untracked\n")
    session = Session(project)
    yield session
    session.close()


def _host(session, script: str):
    from journal_helpers import host_cell

    return host_cell(session, script)[0]


def test_a_tracked_unmodified_file_is_referenced_from_git_not_copied(repository):
    root = repository.workdir
    result = _host(repository, "for f in src/model.py scratch.txt; do echo changed > $f; done")
    files = repository.journal.run(result.changes["run"]).files()
    assert files["src/model.py"].before["hash"].startswith("git:")
    assert not files["scratch.txt"].before["hash"].startswith("git:")
    kept = repository.journal.packs.hashes()
    assert hashlib.sha256(b"weights = 1\n").hexdigest() not in kept
    assert hashlib.sha256(b"untracked\n").hexdigest() in kept
    rewind(repository.journal, result.changes["run"])
    assert (root / "src" / "model.py").read_text() == "weights = 1\n" and (root / "scratch.txt").read_text() == "untracked\n"


def test_a_git_object_that_does_not_hash_to_its_id_fails_the_restore(repository):
    root = repository.workdir
    result = _host(repository, "for f in src/model.py; do echo changed > $f; done")
    reference = repository.journal.run(result.changes["run"]).files()["src/model.py"].before["hash"]
    blob = reference.split(":")[1]
    other = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD:notes.md"], capture_output=True,
                           text=True, check=True).stdout.strip()
    objects = root / ".git" / "objects"
    target = objects / blob[:2] / blob[2:]
    os.chmod(target, 0o644)
    shutil.copyfile(objects / other[:2] / other[2:], target)  # another object's bytes under this id
    with pytest.raises(RewindError, match="damaged"):
        rewind(repository.journal, result.changes["run"])
    assert (root / "src" / "model.py").read_text() == "changed\n"


def test_a_racily_clean_file_is_copied_not_referenced(repository):
    root = repository.workdir
    os.utime(root / ".git" / "index", (time.time() - 3600, time.time() - 3600))  # the index older than the file
    result = _host(repository, "for f in notes.md; do echo changed > $f; done")
    entry = repository.journal.run(result.changes["run"]).files()["notes.md"]
    assert not entry.before["hash"].startswith("git:")
    rewind(repository.journal, result.changes["run"])
    assert (root / "notes.md").read_text() == "tracked notes\n"
