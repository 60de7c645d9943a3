"""Turning a tool's result into what the script sees: stdout text, saved images."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._tool import Image, Tool, ToolResult

IMAGE_DIR = "tool-images"
_EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp", "image/svg+xml": "svg"}


@dataclass
class Rendered:
    stdout: str
    images: list[Path] = field(default_factory=list)


def to_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def result_text(result: ToolResult) -> str:
    """A text result as is, anything else as JSON."""
    if result.structured is not None:
        text = to_json(result.structured)
    else:
        text = "\n".join(result.texts)
    return text if not text or text.endswith("\n") else text + "\n"


def render(result: ToolResult, workdir: Path, tool: Tool) -> Rendered:
    """The result's text, and its images saved under names that say which tool gave them."""
    if not result.images:
        return Rendered(result_text(result))
    label = "-".join(p for p in (tool.server, tool.name) if p)
    return Rendered(result_text(result), [save_image(img, workdir, label) for img in result.images])


def save_image(image: Image, workdir: Path, label: str) -> Path:
    """Save under tool-images/ with a name that says where it came from; returns the relative path."""
    folder = workdir / IMAGE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip("-") or "image"
    ext = _EXTENSIONS.get(image.mime_type, "bin")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1, 10_000):
        path = folder / f"{stem}-{stamp}-{n}.{ext}"
        try:
            with open(path, "xb") as f:  # "x": never overwrite an earlier image
                f.write(image.data)
            return path.relative_to(workdir)
        except FileExistsError:
            continue
    raise OSError(f"could not find a free file name in {folder}")
