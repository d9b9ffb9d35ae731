// DOM helpers. Data only ever becomes text nodes or attribute values set through the DOM, never markup:
// a message value like <img src=x onerror=...> shows as those characters. (The page's Content-Security-
// Policy also requires Trusted Types, so the browser refuses any string written to an HTML sink.)

export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === 'class') node.className = value;
    else if (name.startsWith('on') && typeof value === 'function') node.addEventListener(name.slice(2), value);
    else if (name === 'dataset') Object.assign(node.dataset, value);
    else if (name === 'value') node.value = value;
    else node.setAttribute(name, value === true ? '' : String(value));
  }
  append(node, children);
  return node;
}

export function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(visible(String(child))));
  }
  return node;
}

// Bidirectional controls (the marks, embeddings, overrides and isolates) would reorder the text around them:
// a key "invoice<U+202E>fdp.exe" would show as "invoiceexe.pdf". Every text the console shows from data goes
// through here, and shows each of them as its code point instead: invoice⟨U+202E⟩fdp.exe.
const BIDI_CONTROLS = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

export function visible(text) {
  return text.replace(BIDI_CONTROLS, (c) => `⟨U+${c.charCodeAt(0).toString(16).toUpperCase()}⟩`);
}

export function clear(node) {
  node.replaceChildren();
  return node;
}

// A table of `columns` over the `rows` (tr elements); a column whose cells are numbers (td.num in the first
// row) gets its header aligned with them.
export function table(columns, rows, attrs = {}) {
  const first = rows.length ? rows[0].children : [];
  return h(
    'table',
    attrs,
    h('thead', {}, h('tr', {}, columns.map((c, i) => h('th', {
      class: first[i] && first[i].classList.contains('num') ? 'num' : null }, c)))),
    h('tbody', {}, rows),
  );
}

export function field(label, input) {
  return h('label', {}, label, ' ', input);
}

export function errorBox(error) {
  return h('p', { class: 'error', role: 'alert' }, String(error && error.message ? error.message : error));
}

export function fmtNumber(n) {
  return n === null || n === undefined ? '–' : Number(n).toLocaleString('en-US');
}

export function hashParams() {
  const hash = location.hash.replace(/^#/, '');
  const q = hash.indexOf('?');
  return { page: (q < 0 ? hash : hash.slice(0, q)).replace(/^\/+/, '') || 'topics',
    params: new URLSearchParams(q < 0 ? '' : hash.slice(q + 1)) };
}

export function link(page, params, text) {
  const q = new URLSearchParams(params).toString();
  return h('a', { href: `#/${page}${q ? '?' + q : ''}` }, text);
}
