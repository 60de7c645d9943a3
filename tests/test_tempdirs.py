"""A process's own temporary folders: a killed process's are swept, a live one's never (real processes)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap

import pytest

from toolkernel._process import own_start
from toolkernel._tempdirs import private_folder, sweep

KIND = "toolkernel-test-kind-"


def killed_owner(tmp_path, code: str) -> str:
    """Run `code` (it prints a folder's path) in a child whose temporary folder is `tmp_path`,
    kill it with SIGKILL once it printed, and return the path."""
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ, TMPDIR=str(tmp_path)))
    try:
        path = child.stdout.readline().strip()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert path.startswith(str(tmp_path)), path
    return path


def test_a_killed_processs_folder_is_swept_and_a_live_ones_kept(tmp_path):
    dead = killed_owner(tmp_path, f"""
        import sys, time
        from toolkernel._tempdirs import private_folder
        print(private_folder({KIND!r}), flush=True)
        time.sleep(60)
    """)
    os.mkdir(os.path.join(dead, "inside"))
    live = os.path.join(tmp_path, f"{KIND}{os.getpid()}.{own_start()}-abc")
    os.mkdir(live)
    assert sweep(KIND, str(tmp_path)) == [dead]
    assert not os.path.exists(dead)
    assert os.path.isdir(live)


def test_a_pid_taken_again_by_another_process_does_not_keep_the_folder(tmp_path):
    # This process's pid with another start time: the folder's owner was an earlier process.
    reused = os.path.join(tmp_path, f"{KIND}{os.getpid()}.1-abc")
    os.mkdir(reused)
    assert sweep(KIND, str(tmp_path)) == [reused]


@pytest.mark.parametrize("name", [f"{KIND}abc123", f"{KIND}999999999-x", f"{KIND}12.x-y", "other-999999999.1-abc"])
def test_a_name_of_another_form_is_never_removed(tmp_path, name):
    os.mkdir(tmp_path / name)
    assert sweep(KIND, str(tmp_path)) == []
    assert (tmp_path / name).is_dir()


def test_a_link_named_as_a_dead_owners_folder_is_left_and_not_followed(tmp_path):
    target = tmp_path / "precious"
    target.mkdir()
    (target / "file").write_text("keep")
    os.symlink(target, tmp_path / f"{KIND}999999999.1-abc")
    assert sweep(KIND, str(tmp_path)) == []
    assert (target / "file").read_text() == "keep"


def test_a_new_folder_is_private_and_names_its_owner(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    folder = private_folder(KIND)
    assert os.stat(folder).st_mode & 0o777 == 0o700
    assert os.path.basename(folder).startswith(f"{KIND}{os.getpid()}.{own_start()}-")


def test_a_killed_kernels_bash_channel_is_swept():
    # The host bash channel of a kernel killed with SIGKILL (it cannot remove its folder itself),
    # in a short parent: its socket's path must fit a Unix socket address (108 bytes).
    parent = tempfile.mkdtemp(dir="/tmp")
    try:
        channel_of_killed(parent)
    finally:
        shutil.rmtree(parent)


def channel_of_killed(parent: str) -> None:
    dead = killed_owner(parent, """
        import time
        from toolkernel._runners._hostbash._channel import Channel
        print(Channel().folder, flush=True)
        time.sleep(60)
    """)
    assert os.path.exists(os.path.join(dead, "tools.sock"))
    assert sweep("toolkernel-bash-", parent) == [dead]
