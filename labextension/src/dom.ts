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
    node.textContent = shown(text);
  }
  for (const child of children) {
    node.appendChild(child);
  }
  return node;
}

// Not printable, as Python's str.isprintable has it, but line breaks and tabs (a <pre> keeps them).
const NOT_PRINTABLE = /(?![\n\t])[\p{Cc}\p{Cf}\p{Co}\p{Cn}\p{Cs}\p{Zl}\p{Zp}]|(?! )\p{Zs}/gu;

/**
 * `text` with each character that is not printable written as its escape (`\u202e`), as the
 * kernel's `printable` does. A server names its tools and a script chooses its inputs: a bidi
 * override there makes the call a person approves here read as another one.
 */
export function shown(text: string): string {
  return text.replace(NOT_PRINTABLE, ch => {
    const code = ch.codePointAt(0)!;
    return code > 0xffff ? `\\u{${code.toString(16)}}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });
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
  return `${call.tool} ${pythonJson(call.input)}`;
}

/**
 * JSON spelled as the kernel's lines spell it (Python's `json.dumps`: `{"k": "v", "n": 1}`,
 * non-ASCII escaped), so the question on the buttons reads as the prompt below it.
 */
export function pythonJson(value: unknown): string {
  if (Array.isArray(value)) {
    return `[${value.map(pythonJson).join(', ')}]`;
  }
  if (value !== null && typeof value === 'object') {
    const pairs = Object.entries(value as Record<string, unknown>);
    return `{${pairs.map(([key, item]) => `${asciiJson(key)}: ${pythonJson(item)}`).join(', ')}}`;
  }
  return asciiJson(value);
}

function asciiJson(value: unknown): string {
  const text = JSON.stringify(value) ?? String(value);
  return text.replace(/[\u0080-\uffff]/g, c => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));
}

/**
 * What the call runs, beside its input, for a <pre> each: a command tool's argv (its template
 * may wrap the input in more), a notebook cell's code (the id alone names no code).
 */
export function runs(call: { argv?: unknown; code?: unknown }): HTMLElement[] {
  const shown: HTMLElement[] = [];
  if (call.argv !== undefined) {
    shown.push(el('div', '', 'argv'), el('pre', 'toolkernel-argv', JSON.stringify(call.argv)));
  }
  if (typeof call.code === 'string') {
    shown.push(el('div', '', 'code'), el('pre', 'toolkernel-code', call.code));
  }
  return shown;
}

export function plural(count: number, noun: string): string {
  if (count === 0) {
    return `no ${noun}s`;
  }
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}
