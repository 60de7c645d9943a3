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

from .._approval._run import CANCELLED, RunReport, described_call
from .._errors import printable, printable_json
from .._providers._notebook._text import REPORT_MIME

MIME = REPORT_MIME


def bundle(report: RunReport) -> dict[str, Any]:
    data = report.to_json()
    return {MIME: data, "text/plain": report_text(data), "text/html": report_html(data)}


def display_report(report: RunReport) -> None:
    from IPython.display import display

    display(bundle(report), raw=True)


def report_text(report: dict[str, Any]) -> str:
    """A few readable lines for a terminal (the JSON stays in the bundle's MIME part)."""
    tools = report["tools"]
    lines = [f"tools: the script {_ended(report)}{_exit_code(report)}; {_reads(tools)}."]
    # Names and inputs come from servers and scripts: shown escaped (a terminal prints this part).
    lines += [f"  {'done' if d['ok'] else 'failed'}: {printable(d['tool'])} "
              f"{printable_json(json.dumps(d['input'], ensure_ascii=False))}" for d in tools["done"]]
    lines += [f"  asked: {described_call(a)}: {a['answer']}" for a in tools.get("asked", ())]
    if stopped := tools.get("stopped"):
        lines.append(f"  stopped at: {described_call(stopped['call'])} ({_why(stopped)})")
        lines.append(f"  not reached: {tools['not_reached']}")
    return "\n".join(lines) + "\n" + _advice(report)


def _ended(report: dict[str, Any]) -> str:
    stopped = report["tools"].get("stopped")
    if stopped:
        return "did not start" if stopped.get("before_start") else "stopped"
    if _interrupted(report):
        return "was interrupted"
    return "ran" if report["exit_code"] == 0 else "failed"


def _interrupted(report: dict[str, Any]) -> bool:
    """An interrupt ended a question a person was asked (the exit code is only how it ended)."""
    return any(asked["answer"] == CANCELLED for asked in report["tools"].get("asked", ()))


def _exit_code(report: dict[str, Any]) -> str:
    """The exit code of a script that ran to its end; not of one stopped at a call, whose code is
    only how it was stopped (a host `%%bash` ended by SIGTERM says 143), nor of an interrupted one."""
    return "" if report["tools"].get("stopped") or _interrupted(report) else f" (exit code {report['exit_code']})"


def _reads(tools: dict[str, Any]) -> str:
    count = tools["read_only_calls"]
    return {0: "no read-only calls", 1: "1 read-only call"}.get(count, f"{count} read-only calls")


def _why(stopped: dict[str, Any]) -> str:
    if stopped["reason"] == "call_limit":
        return "the call limit of one run"
    return "a person denied it" if stopped.get("approval") == "denied" else "it needs your approval"


def _advice(report: dict[str, Any]) -> str:
    stopped = report["tools"].get("stopped")
    if not stopped or stopped.get("reason") != "needs_approval" or stopped.get("approval") == "denied":
        return ""
    return (f"\n{described_call(stopped['call'])} needs your approval:\n"
            "  %tools approve            allow it once\n"
            "  %tools approve --always   allow this tool from now on\n"
            "  %tools deny               refuse it\n")


def _argv_html(call: dict[str, Any]) -> str:
    """What the call runs, beside its input: a command tool's argv, a notebook cell's code."""
    shown = [json.dumps(call[key], ensure_ascii=False) for key in ("argv", "code") if key in call]
    return "".join(f", which runs <code>{html.escape(printable_json(text))}</code>" for text in shown)


def report_html(report: dict[str, Any]) -> str:
    tools = report["tools"]
    rows = "".join(
        f"<li><code>{html.escape(printable(d['tool']))}</code> {'ok' if d['ok'] else 'failed'}</li>"
        for d in tools["done"]
    )
    asked = "".join(f"<li><code>{html.escape(described_call(a))}</code>: {html.escape(a['answer'])}</li>"
                    for a in tools.get("asked", ()))
    stopped = tools.get("stopped")
    stop = f"<p>Asked while the script ran:</p><ul>{asked}</ul>" if asked else ""
    if stopped:
        call = stopped["call"]
        stop += (f"<p><b>Stopped</b> ({html.escape(stopped['reason'])}) at "
                f"<code>{html.escape(printable(call['tool']))} {html.escape(json.dumps(call['input']))}</code>"
                f"{_argv_html(call)}</p>")
    return (f"<div class='toolkernel-report'><p>the script {_ended(report)}{_exit_code(report)}; "
            f"{_reads(tools)}</p>{stop}"
            f"<p>Done:</p><ul>{rows or '<li>nothing</li>'}</ul>"
            f"<pre>{html.escape(_advice(report))}</pre></div>")


def progress_line(tool: str, progress: float, total: float | None, message: str | None) -> str:
    amount = f"{progress:g}/{total:g}" if total else f"{progress:g}"
    return f"{tool}: {amount}" + (f" {message}" if message else "")
