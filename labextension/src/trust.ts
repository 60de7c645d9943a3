/**
 * The trust question (application/vnd.toolkernel.trust+json): a folder's config that is not
 * trusted yet, asked about before a cell runs, with each config file's path and text to read
 * first. The kernel waits for the answer: as with a call's question (question.ts), this page says
 * it shows it over the control channel and the buttons answer there; where the kernel asked with a
 * stdin box instead, they type into it (hidden under them, see style/index.css).
 */
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { IReply } from './comm';
import { button, el } from './dom';
import { answerStdin } from './question';

export const TRUST_MIME = 'application/vnd.toolkernel.trust+json';

interface ITrustQuestion {
  folder: string;
  files: string[];
  changed: string[];
  keys: { trust: string; not_now: string };
  config?: Array<{ name: string; path: string; text: string }>;
  id?: string;
  answered?: string;
}

type Control = (content: { action: 'seen' | 'answer'; question: string; reply?: string }) => Promise<IReply>;

const SEEN = new Set<string>();
const ENDED: Record<string, string> = { cancelled: 'cancelled: run the cell again to be asked', later: 'no answer' };

export class TrustRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(private answered: () => void, private control: Control | null = null) {
    super();
    this.addClass('toolkernel-trust');
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const question = model.data[TRUST_MIME] as unknown as ITrustQuestion;
    const status = el('div', 'toolkernel-status');
    const row = el('div', 'toolkernel-answers');
    const off = (chosen?: HTMLButtonElement) => {
      row.querySelectorAll('button').forEach(b => ((b as HTMLButtonElement).disabled = true));
      chosen?.classList.add('toolkernel-chosen');
    };
    const answer = async (key: string, chosen: HTMLButtonElement) => {
      if (answerStdin(this.node, key)) {
        off(chosen);
        this.answered();
        return;
      }
      if (!question.id || !this.control) {
        status.textContent = 'this question is no longer waiting; run the cell again to be asked';
        return;
      }
      off(chosen);
      const taken = await this.control({ action: 'answer', question: question.id, reply: key });
      status.textContent = taken.ok ? '' : (taken.message ?? 'this question is no longer waiting');
      this.answered();
    };
    const trust: HTMLButtonElement = button("Trust this folder's config", () => void answer(question.keys.trust, trust),
                                            'toolkernel-trust-yes');
    const later: HTMLButtonElement = button('Not now', () => void answer(question.keys.not_now, later),
                                            'toolkernel-trust-later');
    row.append(trust, later);
    const changed = question.changed.length ? `; changed since you trusted it: ${question.changed.join(', ')}` : '';
    this.node.textContent = '';
    this.node.append(
      el('div', '', `The config of ${question.folder} is not trusted (${question.files.join(', ')}${changed}).`),
      el('div', '', 'Until you trust it, its servers, hooks, allow rules and lasting approvals are not used.' +
         ' Read it first: trusting lets it start programs.'),
      ...(question.config ?? []).map(file => {
        const shown = el('details', 'toolkernel-config', '', [el('summary', '', file.path), el('pre', '', file.text)]);
        (shown as HTMLDetailsElement).open = file.text.split('\n').length <= 30; // a short one is read as it is
        return shown;
      }),
      row,
      status
    );
    if (question.answered !== undefined) {
      off(question.answered === 'trust' ? trust : question.answered === 'not_now' ? later : undefined);
      status.textContent = ENDED[question.answered] ?? '';
    } else if (question.id && this.control && !SEEN.has(question.id)) {
      SEEN.add(question.id);
      void this.control({ action: 'seen', question: question.id });
    }
  }
}
