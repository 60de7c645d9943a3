/**
 * The before-start question (application/vnd.toolkernel.approval+json). The kernel is
 * waiting in input() right after it; a click answers that stdin request with the key the
 * text prompt understands, so the script starts at once.
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
}

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
        // The kernel's own line ("allowed once; running the script") says what happened: the
        // chosen button stays pressed, and no second, near-identical line is written here.
        disableButtons(row, action);
        status.textContent = '';
        this.host?.answered();
      } else {
        status.textContent = 'this question is no longer waiting; run the cell again';
      }
    });
    this.node.textContent = '';
    this.node.append(el('div', '', `${callLine(question.call)} needs your approval.`), ...runs(question.call), row, status);
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
