// prompt.js - the prompt panel: a streamed completion (POST /v1/generate, SSE) or, in chat mode,
// a conversation through the model's chat template (POST /v1/chat/completions, SSE chunks);
// the finished request's maps are then shown (attention.js showRequest).
import { ApiError, api, clearError, showError, sseEvents } from './api.js';
import { showRequest } from './attention.js';
import { headInterventions, state } from './state.js';
import { $ } from './util.js';

// A settings field: undefined when empty, else a finite number (an integer if int).
function field(name, int) {
  const v = $(name).value.trim();
  if (v === '') return undefined;
  const x = Number(v);
  if (!Number.isFinite(x) || (int && !Number.isInteger(x))) {
    throw new ApiError(`'${name}' must be ${int ? 'an integer' : 'a number'} (got "${v}")`);
  }
  return x;
}

// The settings fields into body; false (error shown) if one is malformed.
function readSettings(body) {
  try {
    for (const [k, int] of [['max_tokens', true], ['temperature', false], ['top_k', true], ['top_p', false], ['seed', true]]) {
      const v = field(k, int);
      if (v !== undefined) body[k] = v;
    }
  } catch (e) {
    showError('settings', e);
    return false;
  }
  return true;
}

// True in chat mode (the "chat" radio button).
export const chatMode = () => $('mode-chat').checked;

// Marks a generation as running (buttons, #completion); returns its AbortController.
function beginRun() {
  const ctl = new AbortController();
  state.generating = ctl;
  $('submit').disabled = true;
  $('stop').disabled = false;
  const comp = $('completion');
  comp.dataset.state = 'running';
  delete comp.dataset.id;
  return ctl;
}

function endRun() {
  state.generating = null;
  $('submit').disabled = false;
  $('stop').disabled = true;
}

// POSTs body as JSON to path; the response, whose events sseEvents() reads.
function postStream(path, body, signal) {
  return api(path, {
    method: 'POST', body: JSON.stringify(body), signal,
    headers: { 'Content-Type': 'application/json' },
  });
}

// With interventions, the same request without them, its text shown beside (#plain); else hidden.
async function plainBeside(body, on) {
  const box = $('plain');
  box.hidden = !on;
  delete box.dataset.state;
  $('plain-gen').textContent = '';
  if (!on) return;
  const plain = { ...body, stream: false };
  delete plain.interventions;
  try {
    const r = await (await api('/v1/generate', { method: 'POST', body: JSON.stringify(plain),
      headers: { 'Content-Type': 'application/json' } })).json();
    $('plain-gen').textContent = plain.prompt + r.text;
    box.dataset.state = 'done';
  } catch (e) {
    box.dataset.state = 'error';
    showError('POST /v1/generate (plain)', e);
  }
}

// The form's submit: a completion of the prompt, or in chat mode the next chat turn.
async function generate(ev) {
  ev.preventDefault();
  if (state.generating) return;
  clearError();
  if (chatMode()) return chat();
  const body = { prompt: $('prompt').value, stream: true };
  if (!readSettings(body)) return;
  const iv = headInterventions();
  if (iv.length) body.interventions = iv;
  const ctl = beginRun();
  plainBeside(body, iv.length > 0);
  const comp = $('completion'), gen = document.createTextNode('');
  $('out-prompt').textContent = body.prompt;
  $('out-gen').textContent = '';
  $('out-gen').appendChild(gen);
  $('gen-status').textContent = 'generating…';
  let id = null, final = null, n = 0;
  try {
    for await (const e of sseEvents(await postStream('/v1/generate', body, ctl.signal))) {
      if (e.error) throw new ApiError(`${e.error.code} ${e.error.type}: ${e.error.message}`);
      if (e.id) id = e.id;
      if (e.text) gen.appendData(e.text);
      if (e.finish_reason) final = e;
      else $('gen-status').textContent = `${id} · ${++n} tokens…`;
    }
    if (!final) throw new ApiError('the stream ended without its final event');
    const u = final.usage, t = final.timings;
    $('gen-status').textContent = `${id} · finish: ${final.finish_reason} · ${u.prompt_tokens} prompt + ` +
      `${u.completion_tokens} generated tokens · ${t.generation_tokens_per_s.toFixed(1)} tokens/s` +
      (u.interventions ? ` · ${u.interventions} interventions` : '');
    comp.dataset.id = id;
    comp.dataset.state = 'done';
    showRequest(id, u.prompt_tokens);
  } catch (e) {
    if (e.name === 'AbortError') {
      comp.dataset.state = 'stopped';
      $('gen-status').textContent = `${id || ''} stopped`;
    } else {
      comp.dataset.state = 'error';
      $('gen-status').textContent = 'failed';
      showError('POST /v1/generate', e);
    }
  } finally {
    endRun();
  }
}

// ---- chat mode --------------------------------------------------------------------------------

function chatBubble(role, text) {
  const d = document.createElement('div');
  d.className = `msg ${role}`;
  d.dataset.role = role;
  d.textContent = text;
  $('chat-log').appendChild(d);
  $('chat-log').scrollTop = $('chat-log').scrollHeight;
  return d;
}

function setMode() {
  const c = chatMode();
  $('chat-log').hidden = !c;
  $('chat-new').hidden = !c;
  $('output').hidden = c;
  $('submit').textContent = c ? 'Send' : 'Generate';
  if (c && $('prompt').dataset.mode !== 'chat') $('prompt').value = 'Hello! Who are you?';
  $('prompt').dataset.mode = c ? 'chat' : 'generate';
}

// Sends the typed message with the conversation so far; streams the reply into a new bubble.
async function chat() {
  const text = $('prompt').value;
  const messages = [...state.chat, { role: 'user', content: text }];
  const body = { messages, stream: true, stream_options: { include_usage: true } };
  if (!readSettings(body)) return;
  const ctl = beginRun();
  const comp = $('completion');
  chatBubble('user', text);
  const bubble = chatBubble('assistant', '');
  $('gen-status').textContent = 'generating…';
  let id = null, finish = null, usage = null, reply = '', n = 0;
  try {
    for await (const e of sseEvents(await postStream('/v1/chat/completions', body, ctl.signal))) {
      if (e.error) throw new ApiError(`${e.error.type}: ${e.error.message}`);
      id = e.id;
      if (e.usage) usage = e.usage;
      for (const c of e.choices || []) {
        if (c.delta && c.delta.content) { reply += c.delta.content; bubble.textContent = reply; n++; }
        if (c.finish_reason) finish = c.finish_reason;
      }
      if (!finish) $('gen-status').textContent = `${id} · ${n} chunks…`;
    }
    if (!finish || !usage) throw new ApiError('the stream ended without its final chunk');
    state.chat = [...messages, { role: 'assistant', content: reply }];
    $('prompt').value = '';
    $('gen-status').textContent = `${id} · finish: ${finish} · ${usage.prompt_tokens} prompt + ` +
      `${usage.completion_tokens} generated tokens`;
    comp.dataset.id = id;
    comp.dataset.state = 'done';
    showRequest(id, usage.prompt_tokens);
  } catch (e) {
    bubble.remove();
    $('chat-log').lastChild && $('chat-log').lastChild.remove(); // the user's message did not happen
    comp.dataset.state = e.name === 'AbortError' ? 'stopped' : 'error';
    $('gen-status').textContent = e.name === 'AbortError' ? 'stopped' : 'failed';
    if (e.name !== 'AbortError') showError('POST /v1/chat/completions', e);
  } finally {
    endRun();
  }
}

// The panel's controls: the form, the mode radios, "New chat" and "Stop".
export function initPrompt() {
  $('gen-form').addEventListener('submit', generate);
  $('mode-gen').addEventListener('change', setMode);
  $('mode-chat').addEventListener('change', setMode);
  $('chat-new').addEventListener('click', () => { state.chat = []; $('chat-log').textContent = ''; });
  $('stop').addEventListener('click', () => state.generating && state.generating.abort());
}
