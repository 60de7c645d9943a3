/**
 * A question while the cell runs (application/vnd.toolkernel.approval+json): before the start,
 * or mid-run where a call waits. The kernel is waiting in input() right after it; a click
 * answers that stdin request with the key the text prompt understands, so the script goes on at
 * once. When the question ends (answered by a click or at the prompt, or an interrupt), the
 * kernel updates this output with `answered`, and the buttons go off for good.
 */
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { callLine, el, runs } from './dom';
import { answerButtons, disableButtons, IHost } from './report';

export const QUESTION_MIME = 'application/vnd.toolkernel.approval+json';

interface IQuestion {
  call: { tool: string; input: Record<string, unknown>; argv?: string[]; code?: string };
  always_offered: boolean;
  keys: { once: string; always: string; deny: string };
  answered?: 'once' | 'always' | 'deny' | 'later' | 'cancelled';
}

/** The button of each answer the kernel reports (`ANSWERS` actions). */
const CHOSEN: Record<string, string> = { once: 'allow_once', always: 'always', deny: 'deny' };
/** A question that ended unanswered, in the words every other line uses. */
const UNANSWERED: Record<string, string> = {
  cancelled: 'cancelled; the call was not made',
  later: 'no answer; the call was not made'
};

export class QuestionRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(private host: IHost | null) {
    super();
    this.addClass('toolkernel-question');
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const question = model.data[QUESTION_MIME] as unknown as IQuestion;
    const status = el('div', 'toolkernel-status');
    const row = answerButtons(question.always_offered, action => {
      const key = { allow_once: question.keys.once, always: question.keys.always, deny: question.keys.deny }[action]!;
      if (answerStdin(this.node, key)) {
        // The kernel's own line ("allowed once; making the call") says what happened, and its
        // update of this output ends the question: no second, near-identical line here.
        disableButtons(row, action);
        status.textContent = '';
        this.host?.answered();
      } else {
        disableButtons(row);
        status.textContent = 'this question is no longer waiting';
      }
    });
    this.node.textContent = '';
    this.node.append(el('div', '', `${callLine(question.call)} needs your approval.`), ...runs(question.call), row, status);
    if (question.answered !== undefined) {
      this.ended(question.answered, row, status);
    }
  }

  /** The question ended: no button stays live; an answer marks its button, an end without one says so. */
  private ended(answered: string, row: HTMLElement, status: HTMLElement): void {
    disableButtons(row, CHOSEN[answered]);
    status.textContent = UNANSWERED[answered] ?? '';
    if (answered === 'cancelled') {
      // The interrupt ended the cell's stdin request too: its box must not take a reply either.
      const input = this.node.closest('.jp-OutputArea')?.querySelector('input.jp-Stdin-input') as HTMLInputElement | null;
      if (input) {
        input.disabled = true;
      }
    }
  }
}

/** Type `key` into the cell's pending input box and press Enter, as a person would. */
export function answerStdin(node: HTMLElement, key: string): boolean {
  const area = node.closest('.jp-OutputArea');
  const input = area?.querySelector('input.jp-Stdin-input') as HTMLInputElement | null;
  if (!input) {
    return false;
  }
  input.value = key;
  input.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true }));
  return true;
}
