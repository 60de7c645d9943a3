/**
 * Building DOM from data with textContent only: no data ever goes through innerHTML.
 */
export function el(
  tag: string,
  className = '',
  text = '',
  children: HTMLElement[] = []
): HTMLElement {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text) {
    node.textContent = text;
  }
  for (const child of children) {
    node.appendChild(child);
  }
  return node;
}

export function button(label: string, onClick: () => void, className = ''): HTMLButtonElement {
  const node = el('button', `jp-Button toolkernel-button ${className}`, label) as HTMLButtonElement;
  node.type = 'button';
  node.addEventListener('click', onClick);
  return node;
}

/** Pretty JSON for a <pre>. */
export function json(value: unknown): string {
  return JSON.stringify(value, null, 2) ?? String(value);
}

export function callLine(call: { tool: string; input: unknown }): string {
  return `${call.tool} ${JSON.stringify(call.input)}`;
}

export function plural(count: number, noun: string): string {
  if (count === 0) {
    return `no ${noun}s`;
  }
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}
