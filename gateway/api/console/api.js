// The API client of the console: every call carries the credential the user signed in with.
// The credential lives in this tab's sessionStorage only (never a cookie, never a URL): fetch() sends it as a
// header, and `credentials: 'omit'` keeps cookies out of every call.

const STORE = 'tubemq-console.credential';

export function credential() {
  try {
    const found = JSON.parse(sessionStorage.getItem(STORE) || 'null');
    return found && typeof found.secret === 'string' ? found : null;
  } catch {
    return null;
  }
}

export function remember(kind, secret) {
  sessionStorage.setItem(STORE, JSON.stringify({ kind, secret }));
}

export function forget() {
  sessionStorage.removeItem(STORE);
}

function base() {
  const meta = document.querySelector('meta[name="tubemq-api-base"]');
  const value = meta ? meta.getAttribute('content') : '';
  return value ? value.replace(/\/+$/, '') + '/' : '';
}

// Paths are relative to the page (/console -> /v1/...), so a prefix an ingress adds keeps working.
export function url(path) {
  return base() + path.replace(/^\/+/, '');
}

export function headers(extra = {}) {
  const h = new Headers(extra);
  const c = credential();
  if (c && c.kind === 'apikey') h.set('x-api-key', c.secret);
  else if (c) h.set('authorization', 'Bearer ' + c.secret);
  return h;
}

export class ApiError extends Error {
  constructor(status, body, text) {
    const err = body && body.error;
    super(err && err.message ? `${status}: ${err.message}` : `${status}: ${(text || '').slice(0, 200)}`);
    this.status = status;
    this.body = body;
  }
}

export const seg = (s) => encodeURIComponent(s);

export async function call(method, path, body, { signal } = {}) {
  const init = { method, headers: headers(), credentials: 'omit', cache: 'no-store', signal };
  if (body !== undefined) {
    init.headers.set('content-type', 'application/json');
    init.body = JSON.stringify(body);
  }
  const answer = await fetch(url(path), init);
  if (answer.status === 204) return null;
  const text = await answer.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!answer.ok) {
    if (answer.status === 401) window.dispatchEvent(new CustomEvent('console:unauthenticated'));
    throw new ApiError(answer.status, data, text);
  }
  return data;
}

export const get = (path, opts) => call('GET', path, undefined, opts);

// A streaming GET (Server-Sent Events) with the credential in a header: EventSource cannot send headers,
// and a secret in a URL would end up in access logs.
export async function openStream(path, { signal, lastEventId } = {}) {
  const h = headers({ accept: 'text/event-stream' });
  if (lastEventId) h.set('last-event-id', lastEventId);
  const answer = await fetch(url(path), { headers: h, credentials: 'omit', cache: 'no-store', signal });
  if (!answer.ok) {
    const text = await answer.text();
    let data = null;
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
    throw new ApiError(answer.status, data, text);
  }
  return answer;
}
