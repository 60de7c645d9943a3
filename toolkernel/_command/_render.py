"""Turning a tool's result into what the script sees: stdout text, saved images."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._checked_open import open_folder_below
from .._longtext import LongJSON, LongText, whole
from .._tool import Image, Tool, ToolResult

IMAGE_DIR = "tool-images"
KEEP_IN_FILE = 1 << 20  # characters of a long text below which it is read whole (quick calls take str)
_EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp", "image/svg+xml": "svg"}


@dataclass
class Rendered:
    stdout: str | LongText
    images: list[Path] = field(default_factory=list)
    unsaved: str | None = None  # why an image could not be saved (the call then fails)


def to_json(value: Any, plain: bool = False) -> str:
    """`value` as indented JSON. `plain`: it holds only what parsing JSON makes (an MCP server's
    structured content), which pydantic's encoder (in Rust, a dependency of the MCP SDK) writes
    as `json.dumps` does, but for a float's exponent (`1e-7` for `1e-07`): with an indent,
    `json.dumps` runs in Python, and a 9 MB result took 0.36 s and peaked at 70 MB, against
    0.07 s and 18 MB (the bytes, then the str). A value it cannot write (a lone surrogate)
    goes by `json.dumps`."""
    if plain:
        from pydantic_core import to_json as plain_json

        try:
            return plain_json(value, indent=2).decode()
        except (ValueError, RecursionError):  # its PydanticSerializationError is a ValueError
            pass
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def result_text(result: ToolResult) -> str | LongText:
    """A text result as is, anything else as JSON. A long text stays in its file when it is
    the result's one text and long enough to be worth it (a `tools` line reads it in pieces)."""
    texts = result.texts
    if type(result.structured) is LongJSON:  # written indented when the reply came, as `to_json` writes
        long = result.structured.text()
        return long.with_suffix("\n") if len(long) >= KEEP_IN_FILE else whole(long) + "\n"
    if result.structured is not None:
        text = to_json(result.structured, result.plain_json)
    elif len(texts) == 1 and type(texts[0]) is LongText and len(texts[0]) >= KEEP_IN_FILE:
        long = texts[0]
        return long if not long or long.endswith("\n") else long.with_suffix("\n")
    else:
        text = "\n".join(map(whole, texts))
    return text if not text or text.endswith("\n") else text + "\n"


def render(result: ToolResult, workdir: Path, tool: Tool) -> Rendered:
    """The result's text, and its images saved under names that say which tool gave them."""
    if not result.images:
        return Rendered(result_text(result))
    label = "-".join(p for p in (tool.server, tool.name) if p)
    try:
        return Rendered(result_text(result), [save_image(img, workdir, label) for img in result.images])
    except OSError as exc:  # a full disk, or a link where tool-images/ goes
        return Rendered(result_text(result), unsaved=f"an image of this result could not be saved: {exc}")


def save_image(image: Image, workdir: Path, label: str) -> Path:
    """Save under tool-images/ with a name that says where it came from; returns the relative path.
    The folder is opened without following a link (a cloned repository may hold one there)."""
    folder = open_folder_below(os.path.realpath(workdir), IMAGE_DIR)
    try:
        return Path(IMAGE_DIR) / _write_new(folder, image, label)
    finally:
        os.close(folder)


def _write_new(folder: int, image: Image, label: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip("-") or "image"
    ext = _EXTENSIONS.get(image.mime_type, "bin")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1, 10_000):
        name = f"{stem}-{stamp}-{n}.{ext}"
        try:  # O_EXCL: never overwrite an earlier image, nor follow a link put at the name
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666,
                         dir_fd=folder)
        except FileExistsError:
            continue
        with open(fd, "wb") as file:
            file.write(image.data)
        return name
    raise OSError(f"could not find a free file name in {IMAGE_DIR}")
