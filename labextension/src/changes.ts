/**
 * The "Changes" sidebar: what toolkernel's runs changed in the workspace, newest first. Each run
 * says where it came from (notebook, cell number, the script's first line, a person or an agent,
 * when), lists its files with a coloured diff each (a notebook's cell by cell), and puts them back
 * with "Rewind" (`%tools rewind ID`). A run a later rewind put back is marked so, with no Rewind; a
 * rewind refused for files changed since offers "Force", after a confirmation.
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { Widget } from '@lumino/widgets';

import { IReply } from './comm';
import { button, el, shown } from './dom';

interface IChangedFile {
  path: string;
  kind: 'created' | 'changed' | 'deleted' | 'renamed' | 'cell';
  to: string | null;
  after_the_fact: boolean;
  not_restorable: string | null;
}

interface IAbout {
  notebook?: string;
  cell_id?: string;
  count?: number;
  first_line?: string;
  who?: 'person' | 'agent';
  description?: string;
}

interface IRun {
  id: string;
  time: string;
  route: string;
  ended: boolean;
  files: IChangedFile[];
  about: IAbout;
  rewound_by: string | null;
  rewinds: string[];
}

export class ChangesPanel extends Widget {
  private body = el('div', 'toolkernel-sidebar-body');
  // What the last rewind said (done, or refused): kept across the refresh that follows it.
  private said = el('div', 'toolkernel-rewound');

  constructor(private request: (data: Record<string, any>) => Promise<IReply>, private tracker: INotebookTracker) {
    super();
    this.id = 'toolkernel-changes';
    this.addClass('toolkernel-sidebar');
    this.addClass('toolkernel-changes-panel');
    this.title.label = 'Changes';
    this.title.caption = "What toolkernel's runs changed, and the way back";
    this.node.append(
      el('div', 'toolkernel-sidebar-head', '', [el('h2', '', 'Changes'), button('Refresh', () => void this.refresh())]),
      this.said,
      this.body
    );
  }

  protected onAfterShow(): void {
    void this.refresh();
  }

  async refresh(): Promise<void> {
    if (!this.isVisible) {
      return;
    }
    const reply = await this.request({ action: 'changes' });
    this.body.textContent = '';
    if (!reply.ok) {
      this.body.appendChild(el('div', 'toolkernel-refused', reply.message ?? 'no answer'));
      return;
    }
    const runs = reply.runs as IRun[];
    if (!runs.length) {
      this.body.appendChild(el('div', 'toolkernel-changes', 'No run has changed a file yet.'));
      return;
    }
    this.body.appendChild(el('ul', 'toolkernel-changes', '', runs.map(run => this.run(run))));
  }

  private run(run: IRun): HTMLElement {
    const diff = el('div', 'toolkernel-diff');
    const head = el('div', 'toolkernel-run-head', '', [el('div', 'toolkernel-run-where', this.where(run))]);
    const about = run.about ?? {};
    if (about.description) {
      head.appendChild(el('div', 'toolkernel-run-description', about.description));
    }
    if (about.first_line) {
      head.appendChild(el('code', 'toolkernel-run-first-line', about.first_line));
    }
    const who = about.who === 'agent' ? ' · by an agent' : about.who === 'person' ? ' · by you' : '';
    const ended = run.ended ? '' : ' · did not end (killed or still running)';
    head.appendChild(el('div', 'toolkernel-run-when', `${run.time}${who}${ended}`));
    const node = el('li', 'toolkernel-run', '', [head]);
    if (run.rewound_by) {
      node.classList.add('toolkernel-run-rewound');
      head.appendChild(el('div', 'toolkernel-rewound-mark', `rewound (by run ${run.rewound_by})`));
    } else {
      head.appendChild(this.rewindButton(run, false));
    }
    node.append(el('ul', 'toolkernel-run-files', '', run.files.map(file => this.file(run, file, diff))), diff);
    node.title = `run ${run.id}`;
    return node;
  }

  /** "analysis.ipynb, cell 3" where the notebook is open here; else its `In [n]`; a rewind's own words. */
  private where(run: IRun): string {
    const about = run.about ?? {};
    if (run.rewinds?.length) {
      return `Rewind of run ${run.rewinds.join(', ')}`;
    }
    if (!about.notebook && about.count === undefined) {
      return run.route === 'direct' ? 'A direct call' : `A ${run.route} run`;
    }
    const number = this.cellNumber(about);
    const cell = number !== null ? `cell ${number}` : about.count !== undefined ? `cell [${about.count}]` : 'a cell';
    return `${about.notebook ?? 'a notebook'}, ${cell}`;
  }

  private cellNumber(about: IAbout): number | null {
    if (!about.cell_id || !about.notebook) {
      return null;
    }
    let found: number | null = null;
    this.tracker.forEach(panel => {
      const path = panel.context.path;
      if (found === null && (path === about.notebook || path.endsWith(`/${about.notebook}`))) {
        const index = panel.content.widgets.findIndex(cell => cell.model.id === about.cell_id);
        found = index >= 0 ? index + 1 : null;
      }
    });
    return found;
  }

  private rewindButton(run: IRun, force: boolean): HTMLButtonElement {
    const go: HTMLButtonElement = button(force ? 'Force' : 'Rewind', async () => {
      if (force) {
        const confirmed = await showDialog({
          title: 'Rewind anyway?',
          body: 'Files changed since this run. Forcing puts back the content from before the run over those ' +
            'newer changes (they are recorded, so this rewind can be undone too).',
          buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Force' })]
        });
        if (!confirmed.button.accept) {
          return;
        }
      }
      go.disabled = true;
      const reply = await this.request({ action: 'rewind', run: run.id, force });
      this.said.textContent = '';
      this.said.className = `toolkernel-rewound ${reply.ok ? 'toolkernel-taken' : 'toolkernel-refused'}`;
      this.said.appendChild(el('pre', '', shown(reply.message ?? 'no answer')));
      if (!reply.ok && !force && (reply.message ?? '').includes('--force')) {
        this.said.appendChild(this.rewindButton(run, true));
      }
      await this.refresh();
    }, force ? 'toolkernel-force' : 'toolkernel-rewind');
    return go;
  }

  private file(run: IRun, file: IChangedFile, diff: HTMLElement): HTMLElement {
    const name = file.to ? `${file.path} -> ${file.to}` : file.path;
    const notes = [
      file.after_the_fact ? 'after the fact' : '',
      file.not_restorable ? `not restorable: ${file.not_restorable}` : ''
    ]
      .filter(note => note)
      .join('; ');
    const parts = [el('span', `toolkernel-kind toolkernel-kind-${file.kind}`, file.kind), el('code', '', name)];
    if (notes) {
      parts.push(el('span', 'toolkernel-description', `(${notes})`));
    }
    if (file.kind !== 'cell') {
      parts.push(button('Diff', async () => {
        const reply = await this.request({ action: 'diff', run: run.id, path: file.path });
        diff.textContent = '';
        diff.appendChild(reply.ok ? coloured(String(reply.diff ?? '')) : el('pre', 'toolkernel-refused', reply.message ?? 'no answer'));
      }));
    }
    return el('li', 'toolkernel-file', '', parts);
  }
}

/** A diff, each line coloured by what it is: added, removed, a hunk or a notebook cell's heading. */
export function coloured(text: string): HTMLElement {
  const pre = el('pre', 'toolkernel-diff-text');
  for (const line of text.split('\n')) {
    const kind = line.startsWith('## ') ? 'cell' : line.startsWith('@@') ? 'hunk'
      : line.startsWith('+++') || line.startsWith('---') ? 'file'
      : line.startsWith('+') ? 'add' : line.startsWith('-') ? 'del' : 'same';
    pre.appendChild(el('span', `toolkernel-diff-${kind}`, line || ' '));
  }
  return pre;
}
