/**
 * The stop report (application/vnd.toolkernel.report+json) with the buttons that answer
 * a stopped call over the comm and offer to run the cell again.
 */
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { IReply } from './comm';
import { button, callLine, el, json, plural, runs } from './dom';

export const REPORT_MIME = 'application/vnd.toolkernel.report+json';

/** What a renderer needs from the notebook it sits in. */
export interface IHost {
  request(data: Record<string, any>): Promise<IReply>;
  /** A question while the cell runs: said on the kernel's control channel (`comm.control`). */
  control(content: { action: 'seen' | 'answer'; question: string; reply?: string }): Promise<IReply>;
  rerun(node: HTMLElement): Promise<void>;
  answered(): void;
}

interface ICall {
  tool: string;
  input: Record<string, unknown>;
  argv?: string[]; // a command tool's filled command line
  code?: string; // a notebook cell's code, for a run by its id
}

interface IReport {
  exit_code: number;
  success: boolean;
  tools: {
    done: Array<ICall & { ok: boolean; result?: unknown; error?: unknown }>;
    read_only_calls: number;
    asked?: Array<ICall & { answer: string }>; // questions a person answered where the call waited
    stopped?: {
      reason: string;
      call: ICall;
      before_start?: boolean;
      [key: string]: unknown;
    };
    not_reached?: string;
  };
}

/** The answers, with the label of their button. Labels are fixed by the issue. */
export const ANSWERS: Array<{ action: string; label: string; key: 'once' | 'always' | 'deny' }> = [
  { action: 'allow_once', label: 'Allow once', key: 'once' },
  { action: 'always', label: 'Always allow', key: 'always' },
  { action: 'deny', label: 'Deny', key: 'deny' }
];

export function answerButtons(alwaysOffered: boolean, onAnswer: (action: string) => void): HTMLElement {
  const row = el('div', 'toolkernel-answers');
  for (const answer of ANSWERS) {
    if (answer.key === 'always' && !alwaysOffered) {
      continue; // a lasting rule would not cover this call: it would ask anyway
    }
    row.appendChild(button(answer.label, () => onAnswer(answer.action), `toolkernel-${answer.key}`));
  }
  return row;
}

/** Every button off once answered; the one chosen (an `ANSWERS` action) stays marked as pressed. */
export function disableButtons(row: HTMLElement, chosen?: string): void {
  row.querySelectorAll('button').forEach(b => ((b as HTMLButtonElement).disabled = true));
  const key = ANSWERS.find(answer => answer.action === chosen)?.key;
  if (key) {
    row.querySelector(`.toolkernel-${key}`)?.classList.add('toolkernel-chosen');
  }
}

/** What a person was asked while the script ran, and their answer ("allowed once", "denied", ...). */
function askedSection(asked: NonNullable<IReport['tools']['asked']>): HTMLElement {
  const section = el('div', 'toolkernel-asked', '', [el('div', '', 'Asked while the script ran:')]);
  for (const question of asked) {
    section.appendChild(el('div', 'toolkernel-asked-call', `${callLine(question)}: ${question.answer}`));
  }
  return section;
}

export class ReportRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(private host: IHost | null) {
    super();
    this.addClass('toolkernel-report');
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const report = model.data[REPORT_MIME] as unknown as IReport;
    this.node.textContent = '';
    const tools = report.tools;
    const asked = tools.asked ?? [];
    // An interrupt that ended an open question: the exit code is only how the run ended.
    const interrupted = asked.some(question => question.answer === 'cancelled');
    const outcome = tools.stopped
      ? `stopped (${tools.stopped.reason})`
      : interrupted ? 'interrupted' : report.success ? 'done' : 'failed';
    // A stopped script's exit code is only how it was stopped (143: a host %%bash ended by SIGTERM).
    const code = tools.stopped || interrupted ? '' : `, exit code ${report.exit_code}`;
    this.node.appendChild(el('div', 'toolkernel-report-head', `toolkernel: ${outcome}${code}`));
    this.node.appendChild(this.doneSection(tools.done, tools.read_only_calls));
    if (asked.length) {
      this.node.appendChild(askedSection(asked));
    }
    if (tools.stopped) {
      // The kernel says in the metadata whether a lasting rule would cover the call.
      const meta = (model.metadata[REPORT_MIME] ?? {}) as { always_offered?: boolean };
      this.node.appendChild(this.stoppedSection(tools.stopped, meta.always_offered === true));
    }
    if (tools.not_reached) {
      this.node.appendChild(el('div', 'toolkernel-not-reached', `Not reached: ${tools.not_reached}`));
    }
  }

  private doneSection(done: IReport['tools']['done'], readOnly: number): HTMLElement {
    const section = el('div', 'toolkernel-done');
    section.appendChild(
      el('div', '', `Done: ${plural(done.length, 'call')} that may change something, ${plural(readOnly, 'read-only call')}`)
    );
    for (const call of done) {
      const summary = el('summary', '', `${call.ok ? '✓' : '✗'} ${call.tool}`);
      const body = [el('div', '', 'input'), el('pre', '', json(call.input))];
      const result = call.ok ? call.result : call.error;
      if (result !== undefined) {
        body.push(el('div', '', call.ok ? 'result' : 'error'), el('pre', '', json(result)));
      }
      section.appendChild(el('details', `toolkernel-call ${call.ok ? 'toolkernel-ok' : 'toolkernel-failed'}`, '', [summary, ...body]));
    }
    return section;
  }

  private stoppedSection(stopped: NonNullable<IReport['tools']['stopped']>, alwaysOffered: boolean): HTMLElement {
    const when = stopped.before_start ? 'before the script started' : 'while the script ran';
    // The report holds what runs in the call itself (`call.argv`, `call.code`).
    const section = el('div', 'toolkernel-stopped', '', [
      el('div', 'toolkernel-stopped-head', `Stopped ${when}: ${stopped.reason.replace(/_/g, ' ')}`),
      el('pre', 'toolkernel-stopped-call', callLine(stopped.call)),
      ...runs(stopped.call)
    ]);
    if (stopped.reason === 'needs_approval' && this.host) {
      section.appendChild(this.answerRow(stopped.call, alwaysOffered));
    }
    return section;
  }

  private answerRow(call: ICall, alwaysOffered: boolean): HTMLElement {
    const host = this.host!;
    const status = el('div', 'toolkernel-status');
    const wrapper = el('div', '', '', [status]);
    const row = answerButtons(alwaysOffered, async action => {
      disableButtons(row, action);
      status.textContent = 'sending the answer to the kernel…';
      const reply = await host.request({ action, call });
      status.textContent = reply.message ?? (reply.ok ? 'done' : 'failed');
      status.classList.add(reply.ok ? 'toolkernel-taken' : 'toolkernel-refused');
      host.answered();
      if (reply.ok && action !== 'deny') {
        wrapper.appendChild(button('Run the cell again', () => void host.rerun(this.node), 'toolkernel-rerun'));
      }
    });
    wrapper.insertBefore(row, status);
    return wrapper;
  }
}
