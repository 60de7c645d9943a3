"""Turning notebook outputs into what a caller reads: plain text and images.

Kernels colour tracebacks and progress output with ANSI codes and redraw
lines with carriage returns; a model or a log wants neither.
"""

from __future__ import annotations

import base64
import re
from typing import Any, Iterable, Mapping

from ..._tool import Image

REPORT_MIME = "application/vnd.toolkernel.report+json"  # a run's report, as the magics display it


def run_reports(outputs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The run reports among a cell's outputs (display data only: a stream is what the cell printed)."""
    found = []
    for output in outputs:
        data = output.get("data") if output.get("output_type") in ("display_data", "execute_result") else None
        report = data.get(REPORT_MIME) if isinstance(data, Mapping) else None
        if isinstance(report, dict):
            found.append(report)
    return found

def newest_line(outputs: Iterable[Mapping[str, Any]]) -> str | None:
    """The last line of text the outputs hold (a stream's, a result's plain text, an error's
    headline), as a terminal shows it; None when they hold none."""
    for output in reversed(list(outputs)):
        kind = output.get("output_type")
        if kind == "stream":
            text = output.get("text", "")
        elif kind == "error":
            text = f"{output.get('ename', '')}: {output.get('evalue', '')}"
        else:
            data = output.get("data")
            text = data.get("text/plain", "") if isinstance(data, Mapping) else ""
        text = "".join(text) if isinstance(text, list) else str(text)
        lines = [line for line in clean_stream(text).splitlines() if line.strip()]
        if lines:
            return lines[-1].strip()
    return None


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_RULE = re.compile(r"^-{20,}$")

# Binary images arrive base64-encoded in the notebook JSON; SVG is text.
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp", "image/svg+xml")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def settle_carriage_returns(text: str) -> str:
    """Keep what a terminal would show: the text after the last \\r on each line."""
    lines = text.split("\n")
    return "\n".join(line.rstrip("\r").rsplit("\r", 1)[-1] for line in lines)


def clean_stream(text: str) -> str:
    return settle_carriage_returns(strip_ansi(text))


def clean_traceback(ename: str, evalue: str, traceback: Iterable[str]) -> str:
    lines = [strip_ansi(part) for part in traceback]
    # IPython frames its tracebacks with a long rule of dashes: noise in plain text.
    lines = [line for line in lines if not _RULE.match(line.strip())]
    text = "\n".join(lines).strip("\n")
    headline = f"{ename}: {evalue}" if evalue else ename
    if not text:
        return headline
    if headline not in text:
        text += "\n" + headline
    return text


def join_source(source: str | list[str]) -> str:
    return source if isinstance(source, str) else "".join(source)


def output_images(output: Mapping[str, Any]) -> list[Image]:
    data = output.get("data") or {}
    images = []
    for mime in IMAGE_TYPES:
        if mime in data:
            images.append(_decode_image(data[mime], mime))
            break  # one representation of one figure is enough
    return images


def _decode_image(payload: Any, mime: str) -> Image:
    text = join_source(payload)
    if mime == "image/svg+xml":
        return Image(text.encode("utf-8"), mime)
    return Image(base64.b64decode(text), mime)


def output_text(output: Mapping[str, Any]) -> str:
    """The text a person would read from one nbformat output."""
    kind = output.get("output_type")
    if kind == "stream":
        return clean_stream(join_source(output.get("text", "")))
    if kind == "error":
        return clean_traceback(output.get("ename", ""), output.get("evalue", ""), output.get("traceback") or [])
    data = output.get("data") or {}
    for mime in ("text/plain", "text/markdown", "text/latex"):
        if mime in data:
            return strip_ansi(join_source(data[mime]))
    return ""


def describe_output(output: Mapping[str, Any], images: list[Image], where: str) -> str:
    """One output as text; its images are appended to `images` and named in the text
    by their 1-based position there (the position in the tool result)."""
    text = output_text(output)
    found = output_images(output)
    lines = []
    if text and not (found and _is_figure_repr(text)):
        lines.append(text.rstrip("\n"))
    for image in found:
        images.append(image)
        lines.append(f"[image {len(images)}: {image.mime_type}, {where}]")
    if not lines and output.get("output_type") != "stream":
        mimes = ", ".join(sorted((output.get("data") or {}).keys())) or str(output.get("output_type", "output"))
        lines.append(f"[{mimes} output not shown as text]")
    return "\n".join(lines)


def _is_figure_repr(text: str) -> bool:
    # matplotlib's text/plain for a figure ("<Figure size 640x480 with 1 Axes>") says nothing the image does not.
    return text.startswith("<") and text.endswith(">") and "\n" not in text
