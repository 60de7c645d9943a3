/**
 * toolkernel in JupyterLab. Per notebook, renderers that can reach that notebook's kernel:
 * the before-start question and the stop report, both with approval buttons; a "Tools"
 * sidebar for the current notebook; and, from the server, the calls an agent's `toolkernel
 * serve` or cell left waiting for a person: a notification each, and a list in the sidebar.
 */
import { ILabShell, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { LabIcon } from '@jupyterlab/ui-components';

/** The Changes sidebar's icon: a turn back (its tab also says "Changes"). */
const changesIcon = new LabIcon({
  name: 'toolkernel:changes',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" viewBox="0 0 24 24"><g class="jp-icon3" fill="#616161">' +
    '<path d="M12 5V1L7 6l5 5V7a6 6 0 1 1-6 6H4a8 8 0 1 0 8-8z"/></g></svg>'
});

/** toolkernel's own sidebar icon (a shell prompt), not the Extension Manager's puzzle piece. */
const toolsIcon = new LabIcon({
  name: 'toolkernel:tools',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" viewBox="0 0 24 24"><g class="jp-icon3" fill="#616161">' +
    '<path d="M3 5.5 4.4 4l7 7-7 7L3 16.5 8.6 11z"/><rect x="12" y="16.5" width="9" height="2.2" rx="0.5"/></g></svg>'
});

import { ChangesPanel } from './changes';
import { control, request } from './comm';
import { QUESTION_MIME, QuestionRenderer } from './question';
import { IHost, REPORT_MIME, ReportRenderer } from './report';
import { PendingRequests } from './pending';
import { ToolsSidebar } from './sidebar';
import { TRUST_MIME, TrustRenderer } from './trust';

function hostFor(panel: NotebookPanel, onAnswer: () => void): IHost {
  return {
    request: data => request(panel.sessionContext.session?.kernel, data),
    control: content => control(panel.sessionContext.session?.kernel, content),
    answered: onAnswer,
    rerun: async (node: HTMLElement) => {
      const notebook = panel.content;
      const index = notebook.widgets.findIndex(cell => cell.node.contains(node));
      if (index < 0) {
        return;
      }
      notebook.activeCellIndex = index;
      notebook.deselectAll();
      await NotebookActions.run(notebook, panel.sessionContext);
    }
  };
}

function addRenderers(panel: NotebookPanel, onAnswer: () => void): void {
  const host = hostFor(panel, onAnswer);
  const factory = (mime: string, make: (h: IHost) => IRenderMime.IRenderer): IRenderMime.IRendererFactory => ({
    safe: true,
    mimeTypes: [mime],
    defaultRank: 0,
    createRenderer: () => make(host)
  });
  panel.content.rendermime.addFactory(factory(REPORT_MIME, h => new ReportRenderer(h)), 0);
  panel.content.rendermime.addFactory(factory(QUESTION_MIME, h => new QuestionRenderer(h)), 0);
  panel.content.rendermime.addFactory(factory(TRUST_MIME, h => new TrustRenderer(onAnswer, c => h.control(c))), 0);
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'toolkernel:plugin',
  description: 'Approval buttons, the stop report and the Tools sidebar for toolkernel',
  autoStart: true,
  requires: [INotebookTracker, ILabShell],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker, shell: ILabShell) => {
    const current = (data: Record<string, any>) => request(tracker.currentWidget?.sessionContext.session?.kernel, data);
    const pending = new PendingRequests(() => shell.activateById('toolkernel-tools'));
    const sidebar = new ToolsSidebar(current, pending);
    sidebar.title.icon = toolsIcon;
    sidebar.title.label = 'Tools';
    shell.add(sidebar, 'left', { rank: 650 });
    pending.start();
    const changes = new ChangesPanel(current, tracker);
    changes.title.icon = changesIcon;
    shell.add(changes, 'left', { rank: 651 });
    const refresh = () => {
      void sidebar.refresh();
      void changes.refresh();
    };
    tracker.widgetAdded.connect((_, panel) => addRenderers(panel, refresh));
    tracker.currentChanged.connect(refresh);
  }
};

export default plugin;
