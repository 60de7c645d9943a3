"""Real kernels, a real Jupyter Server and real notebooks for the notebook tools."""

from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path

import nbformat
import pytest
from jupyter_client import KernelManager
from jupyter_server_helpers import (  # noqa: F401 (the notebook tests import them from here)
    NO_COLLABORATION, SERVER_TOKEN, free_port, server_api, start_server, stop_server)
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output, new_raw_cell

from toolkernel._loop import run
from toolkernel._providers._notebook import unpair
from toolkernel._tool import ToolContext


def png_bytes(width: int = 2, height: int = 2, rgb: tuple[int, int, int] = (255, 0, 0)) -> bytes:
    """A real, decodable PNG."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


PNG = png_bytes()


def rich_notebook() -> nbformat.NotebookNode:
    """Markdown, raw, stream, result, a coloured error and an image, as JupyterLab would save them."""
    error = new_output("error", ename="ZeroDivisionError", evalue="division by zero", traceback=[
        "\x1b[0;31m---------------------------------------------------------------------------\x1b[0m",
        "\x1b[0;31mZeroDivisionError\x1b[0m                         Traceback (most recent call last)",
        "Cell \x1b[0;32mIn[2], line 1\x1b[0m\n\x1b[0;32m----> 1\x1b[0m \x1b[38;5;241m1\x1b[39m\x1b[38;5;241m/\x1b[39m\x1b[38;5;241m0\x1b[39m",
        "\x1b[0;31mZeroDivisionError\x1b[0m: division by zero",
    ])
    cells = [
        new_markdown_cell("# Title\nSome *prose*."),
        new_code_cell("print('hello')\n6 * 7", execution_count=1, outputs=[
            new_output("stream", name="stdout", text="hello\n"),
            new_output("execute_result", data={"text/plain": "42"}, execution_count=1),
        ]),
        new_code_cell("1/0", execution_count=2, outputs=[error]),
        new_raw_cell("raw text stays raw"),
        new_code_cell("show()", execution_count=3, outputs=[
            new_output("display_data", data={"image/png": base64.b64encode(PNG).decode(),
                                             "text/plain": "<Figure size 640x480 with 1 Axes>"}),
        ]),
    ]
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def old_notebook_json() -> str:
    """An nbformat 4.0 notebook as older Jupyter wrote it: no cell ids."""
    return """{
 "cells": [
  {"cell_type": "markdown", "metadata": {}, "source": ["# Old notebook"]},
  {"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": [
    {"name": "stdout", "output_type": "stream", "text": ["old output\\n"]}], "source": ["print('old output')"]},
  {"cell_type": "code", "execution_count": null, "metadata": {}, "outputs": [], "source": ["y = 2"]}
 ],
 "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
 "nbformat": 4,
 "nbformat_minor": 0
}
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def ctx(workdir: Path):
    context = ToolContext(workdir, state={})
    yield context
    run(unpair(context.state), timeout=60)


def call(tool, ctx: ToolContext, **arguments):
    return run(tool.call(arguments, ctx), timeout=700)


@pytest.fixture(scope="module")
def outside_kernel():
    """A kernel someone else runs (as JupyterLab would); it has a connection file."""
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel()
    yield manager
    if manager.is_alive():
        manager.shutdown_kernel(now=True)
    manager.cleanup_resources()


@pytest.fixture(scope="module")
def jupyter_server(tmp_path_factory):
    process, server = start_server(tmp_path_factory, f"--ServerApp.jpserver_extensions={NO_COLLABORATION}")
    yield server
    stop_server(process)


