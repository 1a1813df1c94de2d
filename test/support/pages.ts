// Runs one of the control plane's own HTML pages the way a browser would, as
// far as those pages need: fetches the page, then the script it references,
// and runs that script (in a vm context) against a small DOM made from the
// page's elements with an id, with fetch bound to the page's origin. Tests then
// fill fields and submit the form, and the script calls the real API.
import vm from 'node:vm';

export interface PageElement {
  id: string;
  tag: string;
  value: string;
  textContent: string;
  className: string;
  hidden: boolean;
  disabled: boolean;
  dataset: Record<string, string>;
  addEventListener(type: string, listener: (event: { preventDefault(): void }) => unknown): void;
}

export interface LoadedPage {
  status: number;
  headers: Headers;
  html: string;
  /** `data-page` of <body>. */
  name: string;
  element(id: string): PageElement;
  /** The text and kind (`ok`, `error`, `info`) of the status line. */
  message(): { text: string; kind: string };
  fill(id: string, value: string): void;
  /** Submits the form and resolves once the page's handler (and its API calls) finished. */
  submit(): Promise<void>;
}

export async function openPage(url: string): Promise<LoadedPage> {
  const target = new URL(url);
  const res = await fetch(target, { headers: { accept: 'text/html' } });
  const html = await res.text();
  const name = /<body[^>]*data-page="([^"]+)"/.exec(html)?.[1] ?? '';
  const elements = new Map<string, PageElement & { listeners: Map<string, (event: { preventDefault(): void }) => unknown> }>();
  for (const match of html.matchAll(/<(\w+)([^>]*)\bid="([^"]+)"([^>]*)>/g)) {
    const [, tag, before, id, after] = match;
    const attributes = `${before} ${after}`;
    const listeners = new Map<string, (event: { preventDefault(): void }) => unknown>();
    elements.set(id!, {
      id: id!, tag: tag!, value: '', textContent: '', className: '', dataset: {},
      hidden: /\shidden(\s|$|>|=)/.test(attributes),
      disabled: false,
      listeners,
      addEventListener(type, listener) { listeners.set(type, listener); },
    });
  }
  const body = { dataset: { page: name } };
  const document = { body, getElementById: (id: string) => elements.get(id) ?? null };
  const scriptSrc = /<script src="([^"]+)"><\/script>/.exec(html)?.[1];
  if (res.ok && scriptSrc) {
    const script = await (await fetch(new URL(scriptSrc, target))).text();
    const context = vm.createContext({
      document,
      location: target,
      URLSearchParams,
      console,
      fetch: (path: string, init?: RequestInit) => fetch(new URL(path, target), init),
    });
    vm.runInContext(script, context, { filename: scriptSrc });
  }
  const element = (id: string) => {
    const found = elements.get(id);
    if (!found) throw new Error(`the ${name} page has no element #${id}`);
    return found;
  };
  return {
    status: res.status,
    headers: res.headers,
    html,
    name,
    element,
    message: () => ({ text: element('status').textContent, kind: element('status').className }),
    fill(id, value) { element(id).value = value; },
    async submit() {
      const form = element('form');
      if (form.hidden) throw new Error(`the ${name} page's form is hidden: ${element('status').textContent}`);
      const handler = form.listeners.get('submit');
      if (!handler) throw new Error(`the ${name} page's script did not take the form's submit`);
      let prevented = false;
      await handler({ preventDefault() { prevented = true; } });
      if (!prevented) throw new Error('the submit handler let the browser submit the form');
    },
  };
}
