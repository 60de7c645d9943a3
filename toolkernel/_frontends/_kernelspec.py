"""`toolkernel install-kernel`: a "Python 3 (toolkernel)" kernel that loads toolkernel at start.

It is the usual ipykernel, started with toolkernel as an IPython extension,
so a notebook that selects it runs `%%tools` cells without `%load_ext`.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

KERNEL_NAME = "toolkernel"
DISPLAY_NAME = "Python 3 (toolkernel)"


# Started the way a paired kernel is (`_zmq.module_launch`): neither the launcher nor toolkernel
# is looked for in the kernel's folder, where scripts write; toolkernel is imported before
# IPython puts that folder on sys.path for the notebook's own imports.
def _launch() -> str:
    from .._providers._notebook._zmq import module_launch

    return module_launch("ipykernel_launcher", first="toolkernel")


def kernel_json(python: str = sys.executable) -> dict:
    return {
        "argv": [python, "-c", _launch(), "-f", "{connection_file}", "--IPKernelApp.extensions=toolkernel"],
        "display_name": DISPLAY_NAME,
        "language": "python",
        "metadata": _ipykernel_metadata(),
    }


def _ipykernel_metadata() -> dict:
    """What ipykernel's own kernelspec says of the kernel: the debugger, and from ipykernel 7 on
    `supported_encryption`, which lets a kernel manager encrypt its channels (CurveZMQ)."""
    try:
        from ipykernel.kernelspec import get_kernel_dict
    except ImportError:
        return {"debugger": True}
    return dict(get_kernel_dict().get("metadata") or {"debugger": True})


def install_kernel(*, user: bool = False, prefix: str | None = None) -> str:
    """Install the kernelspec; returns the folder it went to."""
    from jupyter_client.kernelspec import KernelSpecManager

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "kernel.json").write_text(json.dumps(kernel_json(), indent=1) + "\n")
        return KernelSpecManager().install_kernel_spec(folder, KERNEL_NAME, user=user, prefix=prefix)
