"""Issue 48, item 9: the four demo notebooks reproduce under the standard runners of reproducible
notebooks, where no person is there to answer: `jupyter nbconvert --to notebook --execute`,
papermill and `pytest --nbmake`. Each runs to the end, and the three give the same outputs (apart
from what differs between any two runs, see test_notebooks.py). The three run at once, each in its
own copy of the folder, as a person's fresh clone would be; the folder is trusted as the
notebooks' first cell tells a person to do (`toolkernel trust .`)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from test_notebooks import NOTEBOOKS, REPO, comparable

RUN_SECONDS = 280


def _folder(tmp_path: Path, runner: str, env: dict[str, str]) -> Path:
    copied = tmp_path / runner / "notebooks"
    shutil.copytree(REPO / "notebooks", copied)
    trusted = subprocess.run([sys.executable, "-m", "toolkernel", "trust", str(copied)], env=env,
                             capture_output=True, text=True, timeout=120)
    assert trusted.returncode == 0, trusted.stderr
    return copied


def nbconvert(notebook: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, Path]:
    out = notebook.with_name(f"{notebook.stem}.out.ipynb")
    done = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
                           f"--ExecutePreprocessor.timeout={RUN_SECONDS}", "--output", out.name, str(notebook)],
                          cwd=notebook.parent, env=env, capture_output=True, text=True, timeout=RUN_SECONDS + 60)
    return done, out


def papermill(notebook: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, Path]:
    out = notebook.with_name(f"{notebook.stem}.out.ipynb")
    done = subprocess.run([sys.executable, "-m", "papermill", "--cwd", str(notebook.parent), "--no-progress-bar",
                           "--execution-timeout", str(RUN_SECONDS), str(notebook), str(out)],
                          cwd=notebook.parent, env=env, capture_output=True, text=True, timeout=RUN_SECONDS + 60)
    return done, out


def nbmake(notebook: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, Path]:
    # --overwrite keeps the outputs in the notebook; no plugins of this suite's own run (xdist, randomly).
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:xdist",
                           "-p", "no:cacheprovider",
                           "--nbmake", "--overwrite", f"--nbmake-timeout={RUN_SECONDS}", "-q", "--rootdir",
                           str(notebook.parent), "-c", os.devnull, str(notebook)],
                          cwd=notebook.parent, env=env, capture_output=True, text=True, timeout=RUN_SECONDS + 60)
    return done, notebook


RUNNERS = {"nbconvert": nbconvert, "papermill": papermill, "nbmake": nbmake}


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_a_demo_runs_to_the_end_with_the_same_outputs_under_nbconvert_papermill_and_nbmake(tmp_path, name):
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
           "XDG_STATE_HOME": str(tmp_path / "state"), "TOOLKERNEL_ADMIN_CONFIG": str(tmp_path / "no-admin.toml")}
    env.pop("TOOLKERNEL_TRUST_ALL", None)  # as on a person's machine: the folder is trusted as they would
    folders = {runner: _folder(tmp_path, runner, env) for runner in RUNNERS}
    with concurrent.futures.ThreadPoolExecutor(len(RUNNERS)) as pool:
        started = {runner: pool.submit(run, folders[runner] / f"{name}.ipynb", env) for runner, run in RUNNERS.items()}
        finished = {runner: future.result() for runner, future in started.items()}
    outputs = {}
    for runner, (done, out) in finished.items():
        assert done.returncode == 0, f"{runner}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        nb = nbformat.read(out, as_version=4)
        code = [cell for cell in nb.cells if cell.cell_type == "code"]
        assert all(cell.get("execution_count") for cell in code), f"{runner}: not every cell ran"
        assert not [o for c in code for o in c.outputs if o.output_type == "error"], f"{runner}: an error output"
        # Each runner has its own copy of the folder: where it lies is no output of the notebook's.
        outputs[runner] = json.loads(json.dumps(comparable(nb)).replace(str(folders[runner]), "<folder>"))
    assert outputs["papermill"] == outputs["nbconvert"]
    assert outputs["nbmake"] == outputs["nbconvert"]
    if name == "approvals":  # what happens without a person is said where the person would have answered
        text = json.dumps(outputs["nbconvert"])
        assert "needs a person's approval" in text and "the script did not start" in text
