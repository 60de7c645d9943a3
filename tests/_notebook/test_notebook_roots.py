"""The Jupyter Servers running here, as their runtime folder publishes them (`_roots.py`): the token a
server published reaches it with no token given, and `serve --server` with no URL finds the server
it runs under (as an agent Jupyter AI started runs `serve`), else the one whose root holds its folder."""

from __future__ import annotations

import json
import os

import pytest

from toolkernel.__main__ import main
from toolkernel._errors import InvalidInput
from toolkernel._providers._notebook._roots import published_token, server_here
from toolkernel._providers._notebook._server import ServerApi


@pytest.fixture
def runtime(tmp_path, monkeypatch):
    folder = tmp_path / "runtime"
    folder.mkdir()
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(folder))
    monkeypatch.delenv("JUPYTER_TOKEN", raising=False)
    return folder


def publish(runtime, name: str, port: int, root, pid: int, token: str = "") -> str:
    url = f"http://127.0.0.1:{port}/"
    (runtime / f"jpserver-{name}.json").write_text(json.dumps(
        {"url": url, "root_dir": str(root), "pid": pid, "token": token}))
    return url


def test_a_server_running_here_is_reached_with_the_token_it_published(runtime, tmp_path, monkeypatch):
    url = publish(runtime, "a", 8891, tmp_path, os.getpid(), token="published-t0ken")
    assert published_token("http://localhost:8891") == "published-t0ken"  # loopback is one host
    assert published_token("http://127.0.0.1:8892/") == ""  # another server: none
    assert ServerApi(url, None).token == "published-t0ken"
    assert ServerApi(url, "given").token == "given"  # what the person gives wins
    assert ServerApi(url + "?token=in-url", None).token == "in-url"
    monkeypatch.setenv("JUPYTER_TOKEN", "of-another-server")
    assert ServerApi(url, None).token == "published-t0ken"  # the server's own, not a guess from the environment
    publish(runtime, "gone", 8893, tmp_path, 2 ** 22 + 12345, token="stale")  # its process is gone
    assert published_token("http://127.0.0.1:8893/") == ""


def test_serve_with_no_url_takes_the_server_it_runs_under_else_the_one_holding_its_folder(runtime, tmp_path):
    work = tmp_path / "project" / "sub"
    work.mkdir(parents=True)
    outer = publish(runtime, "outer", 8894, tmp_path, os.getpid())
    nearer = publish(runtime, "nearer", 8895, tmp_path / "project", os.getpid())
    assert server_here(work).url == nearer  # the nearest root that holds it
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # A server whose process is an ancestor of this one (Jupyter AI -> agent -> serve) wins, wherever
    # its root is.
    under = publish(runtime, "under", 8896, elsewhere, os.getppid())
    assert server_here(work).url == under
    assert server_here(tmp_path).url == under != outer


def test_serve_with_no_url_and_no_server_here_says_to_give_one(runtime, tmp_path, capsys):
    with pytest.raises(InvalidInput, match="give its URL, --server URL"):
        server_here(tmp_path)
    publish(runtime, "one", 8897, tmp_path, os.getpid())
    publish(runtime, "two", 8898, tmp_path, os.getpid())
    with pytest.raises(InvalidInput, match="2 Jupyter Servers serve .*: give one, --server URL"):
        server_here(tmp_path)
    assert main(["serve", "--server", "--workdir", str(tmp_path)]) == 2
    assert "give one, --server URL" in capsys.readouterr().err
