/**
 * The calls that wait for a person in the pending store (an agent's `toolkernel serve`, an agent's
 * cell), from toolkernel's Jupyter Server extension (toolkernel/_frontends/_lab_server.py), under
 * the server's own authentication: a notification when one appears, a list in the Tools sidebar,
 * and the answer a button gives.
 *
 * Polled, not pushed: the requests are files another process writes, so the server would have to
 * watch a folder for a push; a GET of a small folder every few seconds costs less than keeping a
 * websocket and a watcher, and is made only while the page is visible (none in a background tab).
 */
import { Notification } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';

import { callLine, shown } from './dom';

export const POLL_MS = 2000;
// JupyterLab cuts a notification's message at 140 characters: a call that does not fit is never
// answered from a cut line, only from the sidebar, which shows it whole.
const NOTIFICATION_CHARS = 140;

export type Decision = 'once' | 'always' | 'deny';

export interface IPendingRequest {
  id: string;
  project: string; // its folder, relative to the server's root
  call: { tool: string; input: unknown };
  line: string;
  kind: string;
  reason: string;
  before_start: boolean;
  created: string;
  alive: boolean; // the process that asked still runs: a "once" can count
  always: string | null; // the rule "always" saves, or null where it is not offered
  always_says: string;
}

interface IListing {
  requests: IPendingRequest[];
  skipped: string[];
}

export function keyOf(request: IPendingRequest): string {
  return `${request.project}/${request.id}`;
}

/** The requests waiting, kept up to date while the page is visible; a notification for each new one. */
export class PendingRequests {
  requests: IPendingRequest[] = [];
  skipped: string[] = [];
  /** Why there is no list: the server extension is not enabled, or did not answer. */
  problem = '';
  private listeners: Array<() => void> = [];
  private notices = new Map<string, string>(); // request key -> notification id
  private timer: number | undefined;
  private missing = false;
  private settings = ServerConnection.makeSettings();

  constructor(private showSidebar: () => void) {}

  start(): void {
    document.addEventListener('visibilitychange', () => this.schedule(0));
    this.schedule(0);
  }

  onChange(listener: () => void): void {
    this.listeners.push(listener);
  }

  async refresh(): Promise<void> {
    let listing: IListing;
    try {
      const response = await ServerConnection.makeRequest(this.url(), {}, this.settings);
      if (!response.ok) {
        this.missing = response.status === 404; // not there until the server starts again: asked no more
        this.problem = this.missing
          ? "toolkernel's server extension is not enabled (`jupyter server extension enable toolkernel`," +
            ' then start JupyterLab again): calls that wait for you are not shown here'
          : `the list of waiting calls failed: ${response.status} ${await response.text()}`;
        this.changed([]);
        return;
      }
      listing = (await response.json()) as IListing;
    } catch (error) {
      this.problem = `the server did not answer: ${error}`;
      return; // a server restarting: the list stays as it was until it answers
    }
    this.problem = '';
    this.skipped = listing.skipped;
    this.changed(listing.requests);
  }

  /** Answer one request; what happened, in the words `toolkernel approve` uses. */
  async answer(request: IPendingRequest, decision: Decision): Promise<{ ok: boolean; message: string }> {
    let ok = false;
    let message: string;
    try {
      const response = await ServerConnection.makeRequest(
        this.url(request.id),
        { method: 'POST', body: JSON.stringify({ project: request.project, decision }) },
        this.settings
      );
      const reply = await response.json().catch(() => ({}));
      ok = response.ok;
      message = reply.message ?? `${response.status} ${response.statusText}`;
    } catch (error) {
      message = `the server did not answer: ${error}`;
    }
    await this.refresh();
    return { ok, message };
  }

  private url(id = ''): string {
    return this.settings.baseUrl + 'toolkernel/pending' + (id ? `/${encodeURIComponent(id)}` : '');
  }

  private schedule(delay: number): void {
    window.clearTimeout(this.timer);
    if (document.visibilityState !== 'visible' || this.missing) {
      return; // no request from a page nobody looks at; `visibilitychange` starts it again
    }
    this.timer = window.setTimeout(async () => {
      await this.refresh();
      this.schedule(POLL_MS);
    }, delay);
  }

  private changed(requests: IPendingRequest[]): void {
    this.requests = requests;
    const waiting = new Set(requests.map(keyOf));
    for (const [key, notice] of this.notices) {
      if (!waiting.has(key)) {
        Notification.dismiss(notice); // answered here or anywhere else: the question goes
        this.notices.delete(key);
      }
    }
    for (const request of requests) {
      if (!this.notices.has(keyOf(request))) {
        this.notices.set(keyOf(request), this.notify(request));
      }
    }
    for (const listener of this.listeners) {
      listener();
    }
  }

  private notify(request: IPendingRequest): string {
    const message = `An agent asks: ${shown(callLine(request.call))}`;
    const show = { label: 'Show', caption: 'Show it in the Tools sidebar', callback: () => this.showSidebar() };
    if (message.length > NOTIFICATION_CHARS) {
      return Notification.warning(`An agent asks to run a call too long to show here: ${shown(request.call.tool)}`, {
        autoClose: false,
        actions: [show]
      });
    }
    const answer = (decision: Decision) => async () => {
      const { ok, message: said } = await this.answer(request, decision);
      (ok ? Notification.success : Notification.error)(said, { autoClose: 8000 });
    };
    const actions: Notification.IAction[] = [];
    if (request.alive) {
      actions.push({ label: 'Allow once', caption: 'Allow this call, this one time', callback: answer('once') });
    }
    if (request.always) {
      actions.push({ label: 'Always allow', caption: request.always_says, callback: answer('always') });
    }
    // Three buttons fill the toast; the Tools sidebar lists the same call, with why it asks.
    actions.push({ label: 'Deny', caption: 'Do not make this call', callback: answer('deny'), displayType: 'warn' });
    return Notification.warning(message, { autoClose: false, actions });
  }
}
