"""A notebook run headless that answers toolkernel's questions as a person would in JupyterLab.

In JupyterLab a question (an approval, the trust of a folder) is a row of buttons over a stdin
request that the buttons answer with the key of the text prompt. A headless run answers that
same stdin request with the same key: the answers a cell expects are written in its metadata,
in the order it asks,

    "metadata": {"toolkernel-demo": {"answers": ["once"]}}

with the buttons' words: `once`, `always`, `deny` (an approval), `trust`, `not_now` (a folder's
config). Not under a `toolkernel` key: JupyterLab sends a cell's metadata with its execute request,
and that key there marks a cell an agent sent (`_runners._hostbash._cell.AGENT_KEY`). So a demo
notebook is written for the buttons, and `toolkernel demo`, the tests and any nbclient run go
through the very path a click takes. A question no answer is written for is answered with an empty
line (an approval then asks again and stops the script, the trust question takes it as "Not now")
and named in `unanswered`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from nbclient import NotebookClient

from .._config._untrusted import TRUST_KEYS
from ._lab import PROMPT_KEYS

KEYS = {**PROMPT_KEYS, **TRUST_KEYS}  # an answer word of the metadata -> the key its button types


def cell_answers(cell: Any) -> list[str]:
    """The answers a cell's metadata gives, in order; ValueError for a word no button has."""
    answers = list(cell.get("metadata", {}).get("toolkernel-demo", {}).get("answers", []))
    unknown = [answer for answer in answers if answer not in KEYS]
    if unknown:
        raise ValueError(f"metadata toolkernel-demo.answers: {unknown!r} is not one of {sorted(KEYS)}")
    return answers


class AnsweringClient(NotebookClient):
    """`NotebookClient` that offers stdin and answers each question from the cell's metadata."""

    def __init__(self, nb: Any, **kwargs: Any) -> None:
        super().__init__(nb, **kwargs)
        self.unanswered: list[tuple[int, str]] = []  # (cell index, prompt) of each question no answer fit
        self.asked: list[tuple[int, str]] = []  # (cell index, the answer given) in the order asked

    async def async_start_new_kernel_client(self):
        client = await super().async_start_new_kernel_client()
        client.allow_stdin = True  # nbclient's default is no stdin: every question would stop its cell
        return client

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        answering = asyncio.ensure_future(self._answer(iter(cell_answers(cell)), cell_index))
        try:
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        finally:
            answering.cancel()

    async def _answer(self, answers, cell_index: int) -> None:
        while True:
            message = await self.kc.stdin_channel.get_msg(timeout=None)
            if message["msg_type"] != "input_request":
                continue
            answer = next(answers, None)
            if answer is None:
                self.unanswered.append((cell_index, message["content"].get("prompt", "")))
            else:
                self.asked.append((cell_index, answer))
            self.kc.input(KEYS[answer] if answer is not None else "")
