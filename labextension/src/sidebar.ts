/**
 * The "Tools" sidebar: the calls waiting for you (an agent's `toolkernel serve` or cell, with
 * the buttons that answer them; pending.ts), the current notebook's MCP servers with their
 * state and tools, `tools search`, each tool's input schema, and the lasting approvals with
 * "Revoke". What runs changed has a sidebar entry of its own ("Changes", changes.ts).
 */
import { Widget } from '@lumino/widgets';

import { IReply } from './comm';
import { button, callLine, el, json } from './dom';
import { Decision, IPendingRequest, PendingRequests } from './pending';

interface ITool {
  command: string;
  description: string;
  kind: string;
  schema: unknown;
}

interface IServer {
  name: string;
  description: string;
  state: 'running' | 'not loaded' | 'failed';
  error: string | null;
  tools: ITool[];
}

interface IOverview extends IReply {
  servers: IServer[];
  own_tools: ITool[];
  approvals: Array<{ rule: string; added: string }>;
}

export class ToolsSidebar extends Widget {
  private body = el('div', 'toolkernel-sidebar-body');
  private results = el('pre', 'toolkernel-search-results');
  private searchBox = el('input', 'jp-mod-styled toolkernel-search') as HTMLInputElement;
  private waiting = el('div', 'toolkernel-waiting');
  private said = el('div', 'toolkernel-said');

  constructor(
    private request: (data: Record<string, any>) => Promise<IReply>,
    private pending: PendingRequests
  ) {
    super();
    this.id = 'toolkernel-tools';
    this.addClass('toolkernel-sidebar');
    this.title.caption = 'Tools';
    this.searchBox.placeholder = 'tools search …';
    this.searchBox.addEventListener('keydown', event => {
      if (event.key === 'Enter') {
        void this.search();
      }
    });
    this.node.append(
      el('div', 'toolkernel-sidebar-head', '', [el('h2', '', 'Tools'), button('Refresh', () => void this.refresh())]),
      this.waiting,
      this.said,
      el('div', 'toolkernel-search-row', '', [this.searchBox, button('Search', () => void this.search())]),
      this.results,
      this.body
    );
    pending.onChange(() => this.showWaiting());
  }

  /** The calls waiting for a person, each with its buttons; nothing when none waits. */
  private showWaiting(): void {
    const { requests, skipped, problem } = this.pending;
    this.waiting.textContent = '';
    if (!requests.length && !problem) {
      return;
    }
    this.waiting.append(el('h3', '', `Waiting for you (${requests.length})`));
    if (problem) {
      this.waiting.append(el('div', 'toolkernel-refused', problem));
    }
    this.waiting.append(...requests.map(r => this.waitingCall(r)));
    if (skipped.length) {
      this.waiting.append(el('details', 'toolkernel-skipped', '', [
        el('summary', '', `${skipped.length} file(s) not used`), el('pre', '', skipped.join('\n'))]));
    }
  }

  private waitingCall(request: IPendingRequest): HTMLElement {
    const when = request.before_start ? 'before its script starts' : 'mid-run';
    const parts = [
      el('div', 'toolkernel-waiting-where', `${request.project === '.' ? 'this folder' : request.project}, ${when}`),
      el('pre', 'toolkernel-waiting-call', callLine(request.call)),
      el('div', 'toolkernel-description', request.reason)
    ];
    if (!request.alive) {
      const ended = 'the process that asked has ended: only Always allow still counts';
      parts.push(el('div', 'toolkernel-description', ended));
    }
    const buttons: HTMLButtonElement[] = [];
    const answer = (decision: Decision) => async () => {
      buttons.forEach(b => (b.disabled = true));
      const { ok, message } = await this.pending.answer(request, decision);
      this.said.textContent = '';
      this.said.append(el('div', ok ? 'toolkernel-taken' : 'toolkernel-refused', message));
      buttons.forEach(b => (b.disabled = false)); // a refused answer may be given again; an answered call is gone
    };
    if (request.alive) {
      buttons.push(button('Allow once', answer('once')));
    }
    if (request.always) {
      const always = button('Always allow', answer('always'));
      always.title = request.always_says;
      buttons.push(always);
    } else {
      parts.push(el('div', 'toolkernel-description', request.always_says));
    }
    buttons.push(button('Deny', answer('deny'), 'toolkernel-deny'));
    parts.push(el('div', 'toolkernel-answers', '', buttons));
    return el('div', 'toolkernel-waiting-request', '', parts);
  }

  protected onAfterShow(): void {
    void this.refresh();
  }

  async refresh(): Promise<void> {
    if (!this.isVisible) {
      return;
    }
    const reply = (await this.request({ action: 'overview' })) as IOverview;
    this.body.textContent = '';
    if (!reply.ok) {
      this.body.appendChild(el('div', 'toolkernel-refused', reply.message ?? 'no answer'));
      return;
    }
    this.body.append(
      el('h3', '', 'MCP servers'),
      ...(reply.servers.length ? reply.servers.map(s => this.server(s)) : [el('div', '', 'none configured')]),
      el('h3', '', "toolkernel's own tools"),
      ...reply.own_tools.map(t => this.tool(t)),
      el('h3', '', 'Lasting approvals'),
      this.approvals(reply.approvals)
    );
  }

  private server(server: IServer): HTMLElement {
    const head = el('div', 'toolkernel-server-head', '', [
      el('b', '', server.name),
      el('span', `toolkernel-state toolkernel-state-${server.state.replace(' ', '-')}`, server.state)
    ]);
    const node = el('div', 'toolkernel-server', '', [head]);
    if (server.description) {
      node.appendChild(el('div', 'toolkernel-description', server.description));
    }
    if (server.error) {
      node.appendChild(el('pre', 'toolkernel-refused', server.error));
    }
    node.append(...server.tools.map(t => this.tool(t)));
    return node;
  }

  private tool(tool: ITool): HTMLElement {
    const summary = el('summary', '', tool.command);
    const parts = [summary];
    if (tool.description) {
      parts.push(el('div', 'toolkernel-description', tool.description));
    }
    parts.push(el('div', '', `kind: ${tool.kind}; input schema:`), el('pre', '', json(tool.schema)));
    return el('details', 'toolkernel-tool', '', parts);
  }

  private approvals(approvals: IOverview['approvals']): HTMLElement {
    if (!approvals.length) {
      return el('div', 'toolkernel-approvals', 'none');
    }
    const list = el('ul', 'toolkernel-approvals');
    for (const approval of approvals) {
      const revoke = button('Revoke', async () => {
        revoke.disabled = true;
        const reply = await this.request({ action: 'revoke', rule: approval.rule });
        if (!reply.ok) {
          this.results.textContent = reply.message ?? 'could not revoke';
        }
        await this.refresh();
      });
      const added = approval.added ? ` (since ${approval.added})` : '';
      list.appendChild(el('li', 'toolkernel-approval', '', [el('code', '', approval.rule), el('span', '', added), revoke]));
    }
    return list;
  }

  private async search(): Promise<void> {
    const words = this.searchBox.value.trim();
    if (!words) {
      this.results.textContent = '';
      return;
    }
    const reply = await this.request({ action: 'search', words });
    this.results.textContent = reply.ok ? reply.text : reply.message ?? 'search failed';
  }
}
