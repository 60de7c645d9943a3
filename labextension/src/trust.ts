/**
 * The trust question (application/vnd.toolkernel.trust+json): a folder's config that is not
 * trusted yet, asked about before a cell runs. The kernel waits in input() right after it; a
 * button answers that stdin request with the key the text prompt understands (the prompt
 * itself is hidden under the buttons, see style/index.css).
 */
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { button, el } from './dom';
import { answerStdin } from './question';

export const TRUST_MIME = 'application/vnd.toolkernel.trust+json';

interface ITrustQuestion {
  folder: string;
  files: string[];
  changed: string[];
  keys: { trust: string; not_now: string };
}

export class TrustRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(private answered: () => void) {
    super();
    this.addClass('toolkernel-trust');
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const question = model.data[TRUST_MIME] as unknown as ITrustQuestion;
    const status = el('div', 'toolkernel-status');
    const row = el('div', 'toolkernel-answers');
    const answer = (key: string, chosen: HTMLButtonElement) => {
      if (!answerStdin(this.node, key)) {
        status.textContent = 'this question is no longer waiting; run the cell again to be asked';
        return;
      }
      row.querySelectorAll('button').forEach(b => ((b as HTMLButtonElement).disabled = true));
      chosen.classList.add('toolkernel-chosen');
      this.answered();
    };
    const trust: HTMLButtonElement = button("Trust this folder's config", () => answer(question.keys.trust, trust),
                                            'toolkernel-trust-yes');
    const later: HTMLButtonElement = button('Not now', () => answer(question.keys.not_now, later),
                                            'toolkernel-trust-later');
    row.append(trust, later);
    const changed = question.changed.length ? `; changed since you trusted it: ${question.changed.join(', ')}` : '';
    this.node.textContent = '';
    this.node.append(
      el('div', '', `The config of ${question.folder} is not trusted (${question.files.join(', ')}${changed}).`),
      el('div', '', 'Until you trust it, its servers, hooks, allow rules and lasting approvals are not used.' +
         ' Read it first: trusting lets it start programs.'),
      row,
      status
    );
  }
}
