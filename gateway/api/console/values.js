// Message values as text, JSON or hex. Values come base64-encoded from the API and are decoded to bytes
// here; every rendering is text (textContent), whatever the bytes hold, its bidirectional controls shown
// as code points (dom.js visible).

import { visible } from './dom.js';

const MAX_SHOWN = 64 * 1024;

export function bytesOf(base64) {
  const bin = atob(base64 || '');
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i += 1) out[i] = bin.charCodeAt(i);
  return out;
}

export function bytesFromText(text) {
  return new TextEncoder().encode(text);
}

export function asText(bytes) {
  return new TextDecoder('utf-8', { fatal: false }).decode(bytes.subarray(0, MAX_SHOWN));
}

export function asJson(bytes) {
  try {
    const text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return null;
  }
}

export function asHex(bytes) {
  const lines = [];
  const shown = bytes.subarray(0, MAX_SHOWN);
  for (let at = 0; at < shown.length; at += 16) {
    const row = shown.subarray(at, at + 16);
    const hex = Array.from(row, (b) => b.toString(16).padStart(2, '0')).join(' ');
    const ascii = Array.from(row, (b) => (b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : '.')).join('');
    lines.push(`${at.toString(16).padStart(8, '0')}  ${hex.padEnd(47)}  ${ascii}`);
  }
  return lines.join('\n');
}

// A <pre> showing ``bytes`` in ``view`` (text, json or hex).
export function valueNode(bytes, view) {
  const pre = document.createElement('pre');
  pre.className = `value value-${view}`;
  let text;
  if (view === 'hex') text = asHex(bytes);
  else if (view === 'json') text = asJson(bytes) ?? `(not JSON) ${asText(bytes)}`;
  else text = asText(bytes);
  if (bytes.length > MAX_SHOWN) text += `\n… ${bytes.length - MAX_SHOWN} more bytes`;
  pre.textContent = visible(text);
  pre.title = `${bytes.length} bytes`;
  return pre;
}

export function viewPicker(current, onChange) {
  const select = document.createElement('select');
  select.setAttribute('aria-label', 'show values as');
  for (const [value, label] of [['text', 'text'], ['json', 'JSON'], ['hex', 'hex']]) {
    const option = document.createElement('option');
    option.value = value;
    option.textContent = label;
    option.selected = value === current;
    select.append(option);
  }
  select.addEventListener('change', () => onChange(select.value));
  return select;
}

export function attributesText(attributes) {
  return Object.entries(attributes || {}).map(([k, v]) => `${k}=${v}`).join(', ');
}

// TubeMQ's msgTime (yyyyMMddHHmm, the producer's local time) as yyyy-MM-dd HH:mm.
export function msgTimeText(value) {
  const m = /^(\d{4})(\d{2})(\d{2})(\d{2})(\d{2})$/.exec(value || '');
  return m ? `${m[1]}-${m[2]}-${m[3]} ${m[4]}:${m[5]}` : (value || '–');
}
