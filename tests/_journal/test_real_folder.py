"""The journal in a real person's folder (issue 44): a kernel in a 100,000-file folder that is also
HOME (so the journal's own state folder, the caches and the kernel's history are inside it). An
`rm -rf` of a nested folder, a `sed -i` of a nested file and an `mv` of a folder, each rewound
exactly. The folder is built once (hard links: 1,000 names a content), and these tests are few."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from kernel_helpers import Kernel, isolated_env, write_config

FOLDERS, PER_FOLDER = 100, 1000  # 100,000 files


def _snapshot(root: Path) -> dict[str, tuple[bytes | None, int]]:
    """Every file and folder below `root`: content (None for a folder) and mode bits."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None, p.stat().st_mode)
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    base = tmp_path_factory.mktemp("real-folder")
    work = base / "home"
    (work / "bulk").mkdir(parents=True)
    for folder in range(FOLDERS):
        source = base / f"source-{folder}.csv"
        source.write_text(f"id,value\n{folder},{'x' * 200}\n")
        (work / "bulk" / f"b{folder}").mkdir()
        for i in range(PER_FOLDER):
            os.link(source, work / "bulk" / f"b{folder}" / f"r{i}.csv")
    for name, files in (("d1", 12), ("d2", 3), ("d4", 5)):  # what the cells change: files of their own
        (work / "data" / name / "sub").mkdir(parents=True)
        for i in range(files):
            (work / "data" / name / "sub" / f"part{i}.csv").write_text(f"{name},{i}\n" * (i + 1))
        (work / "data" / name / "run.sh").write_text("#!/bin/sh\necho hi\n")
        os.chmod(work / "data" / name / "run.sh", 0o750)
        (work / "data" / name / "empty").mkdir(mode=0o700)  # a folder with nothing in it comes back too
    write_config(work, '[policy]\nmode = "accept-edits"\n')
    env = {**isolated_env(base), "HOME": str(work), "XDG_STATE_HOME": str(work / ".local" / "state"),
           "XDG_CACHE_HOME": str(work / ".cache"), "PYTHONPATH": os.pathsep.join(sys.path)}
    kernel = Kernel(work, env)
    try:
        kernel.execute_ok("%load_ext toolkernel")
        yield work, kernel
    finally:
        kernel.shutdown()


def _rewound(kernel: Kernel, work: Path) -> str:
    listed = kernel.execute_ok("%tools changes").stdout
    assert ".local/state" not in listed and ".ipython" not in listed and ".cache" not in listed, listed
    return kernel.execute_ok("%tools rewind --last", timeout=300).stdout


def test_rm_rf_of_a_nested_folder_is_rewound_exactly(home):
    work, kernel = home
    before = _snapshot(work / "data" / "d1")
    kernel.execute_ok("%%tools\nrm -rf data/d1", timeout=300)
    assert not (work / "data" / "d1").exists()
    done = _rewound(kernel, work)
    assert "rewound run" in done and "not restored" not in done, done
    assert _snapshot(work / "data" / "d1") == before


def test_sed_i_of_a_nested_file_is_rewound_exactly(home):
    work, kernel = home
    before = _snapshot(work / "data" / "d2")
    kernel.execute_ok("%%tools\nsed -i 's/d2/changed/' data/d2/sub/part2.csv", timeout=300)
    assert b"changed" in (work / "data" / "d2" / "sub" / "part2.csv").read_bytes()
    _rewound(kernel, work)
    assert _snapshot(work / "data" / "d2") == before


def test_mv_of_a_folder_is_rewound_exactly(home):
    work, kernel = home
    before = _snapshot(work / "data" / "d4")
    kernel.execute_ok("%%tools\nmv data/d4 data/d4moved", timeout=300)
    assert not (work / "data" / "d4").exists() and (work / "data" / "d4moved").is_dir()
    _rewound(kernel, work)
    assert _snapshot(work / "data" / "d4") == before
    assert not (work / "data" / "d4moved").exists()  # the folder the run made goes too
