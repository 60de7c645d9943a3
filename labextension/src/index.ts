/**
 * toolkernel in JupyterLab. Per notebook, renderers that can reach that notebook's kernel:
 * the before-start question and the stop report, both with approval buttons; and a "Tools"
 * sidebar for the current notebook.
 */
import { ILabShell, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { LabIcon } from '@jupyterlab/ui-components';

/** toolkernel's own sidebar icon (a shell prompt), not the Extension Manager's puzzle piece. */
const toolsIcon = new LabIcon({
  name: 'toolkernel:tools',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" viewBox="0 0 24 24"><g class="jp-icon3" fill="#616161">' +
    '<path d="M3 5.5 4.4 4l7 7-7 7L3 16.5 8.6 11z"/><rect x="12" y="16.5" width="9" height="2.2" rx="0.5"/></g></svg>'
});

import { request } from './comm';
import { QUESTION_MIME, QuestionRenderer } from './question';
import { IHost, REPORT_MIME, ReportRenderer } from './report';
import { ToolsSidebar } from './sidebar';
import { TRUST_MIME, TrustRenderer } from './trust';

function hostFor(panel: NotebookPanel, onAnswer: () => void): IHost {
  return {
    request: data => request(panel.sessionContext.session?.kernel, data),
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
  panel.content.rendermime.addFactory(factory(TRUST_MIME, () => new TrustRenderer(onAnswer)), 0);
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'toolkernel:plugin',
  description: 'Approval buttons, the stop report and the Tools sidebar for toolkernel',
  autoStart: true,
  requires: [INotebookTracker, ILabShell],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker, shell: ILabShell) => {
    const sidebar = new ToolsSidebar(data => request(tracker.currentWidget?.sessionContext.session?.kernel, data));
    sidebar.title.icon = toolsIcon;
    shell.add(sidebar, 'left', { rank: 650 });
    const refresh = () => void sidebar.refresh();
    tracker.widgetAdded.connect((_, panel) => addRenderers(panel, refresh));
    tracker.currentChanged.connect(refresh);
  }
};

export default plugin;
