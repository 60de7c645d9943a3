"""Showing the stop report and progress in a notebook.

The report (`_run.RunReport`) is displayed as its versioned JSON under
`application/vnd.toolkernel.report+json` (schema: docs/report.schema.json; the
JupyterLab extension renders it with approval buttons), with text and HTML
fallbacks for every other frontend.
"""

from __future__ import annotations

import html
import json
from typing import Any

from ._run import RunReport, described_call

MIME = "application/vnd.toolkernel.report+json"


def bundle(report: RunReport) -> dict[str, Any]:
    data = report.to_json()
    return {MIME: data, "text/plain": report_text(data), "text/html": report_html(data)}


def display_report(report: RunReport) -> None:
    from IPython.display import display

    display(bundle(report), raw=True)


def report_text(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, ensure_ascii=False, default=str) + "\n" + _advice(report)


def _advice(report: dict[str, Any]) -> str:
    stopped = report["tools"].get("stopped")
    if not stopped or stopped.get("reason") != "needs_approval":
        return ""
    return (f"\n{described_call(stopped['call'])} needs your approval:\n"
            "  %tools approve            allow it once\n"
            "  %tools approve --always   allow this tool from now on\n"
            "  %tools deny               refuse it\n")


def _argv_html(call: dict[str, Any]) -> str:
    if "argv" not in call:
        return ""
    return f", which runs <code>{html.escape(json.dumps(call['argv'], ensure_ascii=False))}</code>"


def report_html(report: dict[str, Any]) -> str:
    tools = report["tools"]
    rows = "".join(
        f"<li><code>{html.escape(d['tool'])}</code> {'ok' if d['ok'] else 'failed'}</li>"
        for d in tools["done"]
    )
    stopped = tools.get("stopped")
    stop = ""
    if stopped:
        call = stopped["call"]
        stop = (f"<p><b>Stopped</b> ({html.escape(stopped['reason'])}) at "
                f"<code>{html.escape(call['tool'])} {html.escape(json.dumps(call['input']))}</code>"
                f"{_argv_html(call)}</p>")
    return (f"<div class='toolkernel-report'><p>exit code {report['exit_code']}; "
            f"{tools['read_only_calls']} read-only call(s)</p>{stop}"
            f"<p>Done:</p><ul>{rows or '<li>nothing</li>'}</ul>"
            f"<pre>{html.escape(_advice(report))}</pre></div>")


def progress_line(tool: str, progress: float, total: float | None, message: str | None) -> str:
    amount = f"{progress:g}/{total:g}" if total else f"{progress:g}"
    return f"{tool}: {amount}" + (f" {message}" if message else "")
