/**
 * A question while the cell runs (application/vnd.toolkernel.approval+json): before the start (one
 * question for every call of the script that needs a person, `calls`), or mid-run where a call waits
 * (`call`). The kernel waits for the answer; this page tells it, over the control channel, that it
 * shows the question (`seen`), and the buttons answer there, so no stdin box appears. When the kernel
 * did not hear that in time it asks with a stdin box instead: the buttons then type into that box
 * (hidden under them, see style/index.css). When the question ends (answered, an interrupt), the
 * kernel updates this output with `answered`, and the buttons go off for good.
 */
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { button, callLine, el, runs } from './dom';
import { ANSWERS, answerButtons, disableButtons, IHost } from './report';

export const QUESTION_MIME = 'application/vnd.toolkernel.approval+json';

interface ICall {
  tool: string;
  input: Record<string, unknown>;
  argv?: string[];
  code?: string;
}

interface ILine {
  call: ICall;
  always_offered: boolean;
  reason: string;
}

interface IQuestion {
  call?: ICall;
  always_offered?: boolean;
  calls?: ILine[];
  keys: { once: string; always: string; deny: string };
  hint?: string;
  id?: string;
  answered?: string | string[];
}

/** The button of each answer the kernel reports (`ANSWERS` actions). */
const CHOSEN: Record<string, string> = { once: 'allow_once', always: 'always', deny: 'deny' };
/** A question that ended unanswered, in the words every other line uses. */
const UNANSWERED: Record<string, string> = {
  cancelled: 'cancelled; the call was not made',
  later: 'no answer; the call was not made'
};

/** Question ids this page said it shows: a re-render (the kernel's update) says it once. */
const SEEN = new Set<string>();

export class QuestionRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(private host: IHost | null) {
    super();
    this.addClass('toolkernel-question');
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const question = model.data[QUESTION_MIME] as unknown as IQuestion;
    const status = el('div', 'toolkernel-status');
    this.node.textContent = '';
    const rows = question.calls ? this.lines(question, status) : this.single(question, status);
    if (question.hint) {
      this.node.appendChild(el('div', 'toolkernel-hint', question.hint));
    }
    this.node.appendChild(status);
    if (question.answered !== undefined) {
      this.ended(question.answered, rows, status);
    } else if (question.id && this.host && !SEEN.has(question.id)) {
      SEEN.add(question.id);
      void this.host.control({ action: 'seen', question: question.id });
    }
  }

  /** One call: its line, what it runs, Allow once / Always allow / Deny. */
  private single(question: IQuestion, status: HTMLElement): HTMLElement[] {
    const call = question.call!;
    const row = answerButtons(question.always_offered === true, action => {
      const key = { allow_once: question.keys.once, always: question.keys.always, deny: question.keys.deny }[action]!;
      void this.answer(question, key, status, () => disableButtons(row, action));
    });
    this.node.append(el('div', '', `${callLine(call)} needs your approval.`), ...runs(call), row);
    return [row];
  }

  /**
   * Every call of the script that needs a person: a line each with its own buttons, and buttons
   * for the whole list. A line's button keeps that line's answer; once each line has one, they
   * are sent together (one letter a call, as the text prompt takes them).
   */
  private lines(question: IQuestion, status: HTMLElement): HTMLElement[] {
    const lines = question.calls!;
    const chosen: Array<string | undefined> = lines.map(() => undefined);
    const rows: HTMLElement[] = [];
    const all = lines.every(line => line.always_offered);
    const whole = el('div', 'toolkernel-answers toolkernel-whole');
    const send = (reply: string, done: () => void) => void this.answer(question, reply, status, done);
    const list = el('ol', 'toolkernel-calls');
    lines.forEach((line, index) => {
      const row = answerButtons(line.always_offered, action => {
        chosen[index] = action;
        row.querySelectorAll('button').forEach(b => b.classList.remove('toolkernel-chosen'));
        row.querySelector(`.toolkernel-${ANSWERS.find(a => a.action === action)!.key}`)?.classList.add('toolkernel-chosen');
        if (chosen.every(choice => choice !== undefined)) {
          const letters = chosen.map(choice => ({ allow_once: 'o', always: 'a', deny: 'd' })[choice!]).join('');
          send(letters, () => {
            lines.forEach((_, i) => disableButtons(rows[i], chosen[i]));
            disableButtons(whole);
          });
        }
      });
      row.classList.add('toolkernel-line-answers');
      rows.push(row);
      list.appendChild(el('li', 'toolkernel-call-line', '', [
        el('div', '', `${callLine(line.call)} (${line.reason})`),
        ...runs(line.call),
        row
      ]));
    });
    const label = (action: string) =>
      ({ allow_once: `Allow all ${lines.length} once`, always: `Always allow all ${lines.length}`, deny: 'Deny' })[action]!;
    for (const answer of ANSWERS) {
      if (answer.key === 'always' && !all) {
        continue; // a lasting rule would not cover every line: they keep their own buttons
      }
      whole.appendChild(button(label(answer.action), () => {
        send(question.keys[answer.key], () => {
          rows.forEach(r => disableButtons(r, answer.action));
          disableButtons(whole, answer.action);
        });
      }, `toolkernel-${answer.key}`));
    }
    rows.push(whole);
    this.node.append(
      el('div', 'toolkernel-question-head', `This script makes ${lines.length} calls that need your approval before it starts:`),
      list,
      el('div', 'toolkernel-whole-label', 'For all of them:'),
      whole
    );
    return rows;
  }

  /** The reply, to the kernel: over the control channel, or into the stdin box where it asked with one. */
  private async answer(question: IQuestion, reply: string, status: HTMLElement, done: () => void): Promise<void> {
    if (answerStdin(this.node, reply)) {
      done();
      status.textContent = '';
      this.host?.answered();
      return;
    }
    if (!question.id || !this.host) {
      status.textContent = 'this question is no longer waiting';
      return;
    }
    done();
    const taken = await this.host.control({ action: 'answer', question: question.id, reply });
    // The kernel's own line ("allowed once; making the call") says what happened, and its update
    // of this output ends the question: no second, near-identical line here.
    status.textContent = taken.ok ? '' : taken.message ?? 'this question is no longer waiting';
    this.host.answered();
  }

  /** The question ended: no button stays live; an answer marks its button, an end without one says so. */
  private ended(answered: string | string[], rows: HTMLElement[], status: HTMLElement): void {
    if (Array.isArray(answered)) {
      rows.forEach((row, index) => disableButtons(row, CHOSEN[answered[index]]));
      status.textContent = '';
      return;
    }
    rows.forEach(row => disableButtons(row, CHOSEN[answered]));
    status.textContent = UNANSWERED[answered] ?? '';
    if (answered === 'cancelled') {
      // The interrupt ended the cell's stdin request too, if there was one: its box takes no reply.
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
  // Not a box already answered (JupyterLab keeps it a moment, fading), whose Enter does nothing.
  const input = area?.querySelector(
    '.jp-OutputArea-child:not(.jp-OutputArea-stdin-hiding) input.jp-Stdin-input:not(:disabled)'
  ) as HTMLInputElement | null;
  if (!input) {
    return false;
  }
  input.value = key;
  input.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true }));
  return true;
}
