// api.js - the client side of the daemon's API: fetch with the API key, the daemon's JSON error
// shape turned into a message, Server-Sent Events, and the error banner.
import { $ } from './util.js';

export class ApiError extends Error {}

// Shows "context: message" in the error banner (an aborted request is not an error).
export function showError(context, e) {
  if (e && e.name === 'AbortError') return;
  $('error-text').textContent = `${context}: ${e && e.message ? e.message : String(e)}`;
  $('error').hidden = false;
}

export function clearError() {
  $('error').hidden = true;
  $('error-text').textContent = '';
}

function authHeaders(extra) {
  const h = Object.assign({}, extra);
  const key = $('api-key').value.trim();
  if (key) h.Authorization = 'Bearer ' + key;
  return h;
}

// The error message of a failed response: the daemon's one JSON error shape, or the status.
async function errorText(r) {
  let msg = `HTTP ${r.status} ${r.statusText}`;
  try {
    const j = await r.json();
    if (j && j.error) msg = `${j.error.code} ${j.error.type}: ${j.error.message}`;
  } catch (_) { /* not JSON: keep the status line */ }
  return msg;
}

// fetch(path, opts) with the API key; throws ApiError (a readable message) unless 2xx.
export async function api(path, opts = {}) {
  let r;
  try {
    r = await fetch(path, Object.assign({}, opts, { headers: authHeaders(opts.headers) }));
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(`cannot reach the daemon (${e.message})`);
  }
  if (!r.ok) throw new ApiError(await errorText(r));
  return r;
}

export async function getJSON(path) {
  return (await api(path)).json();
}

// Parsed `data:` payloads of a Server-Sent Events response, up to `data: [DONE]`.
export async function* sseEvents(r) {
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true }).replace(/\r\n/g, '\n');
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, k);
      buf = buf.slice(k + 2);
      const data = block.split('\n').filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).replace(/^ /, '')).join('\n');
      if (!data) continue;
      if (data === '[DONE]') return;
      yield JSON.parse(data);
    }
  }
}

// The API key field (kept for the tab's session) and the banner's close button; onKeyChange
// runs when the user enters a new key.
export function initApi(onKeyChange) {
  const saved = sessionStorage.getItem('attnd-api-key');
  if (saved) $('api-key').value = saved;
  $('api-key').addEventListener('change', () => {
    sessionStorage.setItem('attnd-api-key', $('api-key').value.trim());
    onKeyChange();
  });
  $('error-close').addEventListener('click', clearError);
}
