// attnd playground: streamed completions, attention heatmaps and the logit lens.
// Plain browser JavaScript, no framework, no requests anywhere but this daemon.
//
// Data flow: POST /v1/generate (SSE), or in chat mode POST /v1/chat/completions (SSE chunks) ->
// the finished request's id -> GET /attention?id&layer&head (heatmap, head grid, token strip) and
// GET /logit_lens?id&pos (lens table). GET /heads (the head census) fills the layer x head grid;
// the page opens on the strongest induction head (else the strongest previous-token head) with a
// prompt that repeats a phrase (REPEAT_PROMPT), generated greedily.
// Elements carry data-* attributes describing what they show (ids, positions, weights), which
// the browser test (tests/browser/test_playground.mjs) reads back.
'use strict';

(() => {
  const $ = (id) => document.getElementById(id);

  const state = {
    model: null,        // /v1/models data[0]: n_layer, n_head, ...
    reqId: null,        // the request the maps show ("gen-N")
    nPrompt: 0,         // its prompt tokens
    tokens: [],         // its token pieces (from /attention)
    tokenIds: [],
    layer: 0,
    head: 0,
    attn: null,         // the /attention answer the heatmap shows
    geom: null,         // heatmap geometry: {n, cell, margin}
    lensPos: -1,
    lensPinned: false,
    generating: null,   // AbortController of the running generation
    chat: [],           // chat mode: the conversation so far, [{role, content}]
  };
  let heatSeq = 0, gridSeq = 0, lensSeq = 0, lensTimer = 0;
  // a made-up phrase (not in the corpus) said twice: the second time only copying predicts it
  const REPEAT_PROMPT = 'Jonah and Boaz saw seven white horses near Tarshish. Jonah and Boaz saw seven white horses near Tarshish.';

  // ---- errors and API calls -------------------------------------------------------------------

  class ApiError extends Error {}

  function showError(context, e) {
    if (e && e.name === 'AbortError') return;
    $('error-text').textContent = `${context}: ${e && e.message ? e.message : String(e)}`;
    $('error').hidden = false;
  }

  function clearError() {
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

  async function api(path, opts = {}) {
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

  async function getJSON(path) {
    return (await api(path)).json();
  }

  // Parsed `data:` payloads of a Server-Sent Events response, up to `data: [DONE]`.
  async function* sseEvents(r) {
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

  // ---- small helpers --------------------------------------------------------------------------

  // A token's text made visible: spaces, newlines and tabs shown as symbols, long ones cut.
  function visible(s, max = 14) {
    let t = String(s).replace(/ /g, '·').replace(/\n/g, '⏎').replace(/\t/g, '⇥').replace(/\r/g, '␍');
    if (t === '') t = '∅';
    return t.length > max ? t.slice(0, max - 1) + '…' : t;
  }

  function fillSelect(sel, n, value) {
    sel.textContent = '';
    for (let i = 0; i < n; i++) {
      const o = document.createElement('option');
      o.value = String(i);
      o.textContent = String(i);
      sel.appendChild(o);
    }
    sel.value = String(value);
  }

  // Colour map (dark purple -> orange -> pale yellow), 256 entries, indexed by sqrt(weight).
  const LUT = (() => {
    const stops = [[0, 0, 4], [40, 11, 84], [101, 21, 110], [159, 42, 99], [212, 72, 66],
      [245, 125, 21], [250, 193, 39], [252, 255, 164]];
    const lut = new Uint8ClampedArray(256 * 3);
    for (let i = 0; i < 256; i++) {
      const x = (i / 255) * (stops.length - 1), k = Math.min(Math.floor(x), stops.length - 2), f = x - k;
      for (let c = 0; c < 3; c++) lut[i * 3 + c] = stops[k][c] + (stops[k + 1][c] - stops[k][c]) * f;
    }
    return lut;
  })();
  const UPPER = [26, 29, 36]; // cells above the diagonal (a token never attends to later ones)

  // Fills an n x n ImageData with the causal weights of a (rows: queries, columns: keys).
  function weightsImage(ctx, a) {
    const n = a.n_tokens, img = ctx.createImageData(n, n), px = img.data;
    for (let i = 0; i < n; i++) {
      const row = a.weights[i];
      let o = i * n * 4;
      for (let j = 0; j < n; j++, o += 4) {
        if (j <= i) {
          const w = row[j], k = Math.max(0, Math.min(255, Math.round(Math.sqrt(Math.max(0, w)) * 255))) * 3;
          px[o] = LUT[k]; px[o + 1] = LUT[k + 1]; px[o + 2] = LUT[k + 2];
        } else {
          px[o] = UPPER[0]; px[o + 1] = UPPER[1]; px[o + 2] = UPPER[2];
        }
        px[o + 3] = 255;
      }
    }
    return img;
  }

  // ---- attention maps -------------------------------------------------------------------------

  const attnCache = new Map(); // "id/layer/head" -> Promise of the /attention answer
  function getAttention(id, layer, head) {
    const key = `${id}/${layer}/${head}`;
    let p = attnCache.get(key);
    if (!p) {
      p = getJSON(`/attention?id=${encodeURIComponent(id)}&layer=${layer}&head=${head}`);
      p.catch(() => attnCache.delete(key));
      attnCache.set(key, p);
      if (attnCache.size > 96) attnCache.delete(attnCache.keys().next().value);
    }
    return p;
  }

  async function loadHeatmap() {
    const my = ++heatSeq, id = state.reqId, layer = state.layer, head = state.head;
    const canvas = $('heatmap');
    canvas.dataset.ready = '0';
    let a;
    try {
      a = await getAttention(id, layer, head);
    } catch (e) {
      if (my === heatSeq) showError(`GET /attention (layer ${layer}, head ${head})`, e);
      return;
    }
    if (my !== heatSeq) return;
    state.attn = a;
    if (state.tokens.length !== a.n_tokens || canvas.dataset.id !== id) setTokens(a);
    drawHeatmap(a);
    Object.assign(canvas.dataset, { id, layer: String(layer), head: String(head), ready: '1' });
  }

  function drawHeatmap(a) {
    const t0 = performance.now();
    const canvas = $('heatmap'), ctx = canvas.getContext('2d');
    const n = a.n_tokens;
    const cell = Math.max(1, Math.min(22, Math.floor(640 / n)));
    const step = Math.max(1, Math.ceil(11 / cell)); // label every step-th token so labels never overlap
    const labels = a.tokens.map((t) => visible(t));
    ctx.font = '10px ui-monospace, "DejaVu Sans Mono", monospace';
    let widest = 0;
    for (let i = 0; i < n; i += step) widest = Math.max(widest, ctx.measureText(labels[i]).width);
    const margin = Math.ceil(Math.min(110, widest) + 8);
    canvas.width = margin + n * cell + 2;
    canvas.height = margin + n * cell + 2;
    ctx.fillStyle = '#1c1f26';
    ctx.fillRect(0, 0, canvas.width, canvas.height);

    const off = document.createElement('canvas');
    off.width = n;
    off.height = n;
    const octx = off.getContext('2d');
    octx.putImageData(weightsImage(octx, a), 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(off, margin, margin, n * cell, n * cell);

    ctx.font = '10px ui-monospace, "DejaVu Sans Mono", monospace';
    ctx.fillStyle = '#aab2c0';
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'right';
    for (let i = 0; i < n; i += step) ctx.fillText(labels[i], margin - 4, margin + i * cell + cell / 2, margin - 6);
    ctx.save();
    ctx.translate(margin, margin);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = 'left';
    for (let j = 0; j < n; j += step) ctx.fillText(labels[j], 4, j * cell + cell / 2, margin - 6);
    ctx.restore();

    state.geom = { n, cell, margin };
    Object.assign(canvas.dataset, { n: String(n), cell: String(cell), margin: String(margin),
      renderMs: (performance.now() - t0).toFixed(1) });
  }

  // The cell under a mouse event on the heatmap, or null.
  function cellAt(e) {
    const g = state.geom;
    if (!g || !state.attn) return null;
    const r = $('heatmap').getBoundingClientRect();
    const x = e.clientX - r.left - g.margin, y = e.clientY - r.top - g.margin;
    if (x < 0 || y < 0) return null;
    const i = Math.floor(y / g.cell), j = Math.floor(x / g.cell);
    if (i >= g.n || j >= g.n) return null;
    return { i, j };
  }

  function onHeatMove(e) {
    const tip = $('tooltip'), c = cellAt(e);
    if (!c) {
      tip.hidden = true;
      return;
    }
    const a = state.attn, t = a.tokens;
    const causal = c.j <= c.i, w = causal ? a.weights[c.i][c.j] : 0;
    tip.textContent = `query ${c.i} ${visible(t[c.i], 24)}\nkey   ${c.j} ${visible(t[c.j], 24)}\n` +
      (causal ? `weight ${w.toPrecision(6)}` : 'weight 0 (a later token)');
    Object.assign(tip.dataset, { i: String(c.i), j: String(c.j), weight: String(w) });
    const wrap = $('heatmap').parentElement.getBoundingClientRect();
    tip.style.left = `${e.clientX - wrap.left + $('heatmap').parentElement.scrollLeft + 14}px`;
    tip.style.top = `${e.clientY - wrap.top + $('heatmap').parentElement.scrollTop + 14}px`;
    tip.hidden = false;
    if (!state.lensPinned) setLensPos(c.i);
  }

  function onHeatClick(e) {
    const c = cellAt(e);
    if (!c) return;
    pinLens(c.i);
  }

  // ---- head grid: every head of the chosen layer ----------------------------------------------

  async function loadGrid() {
    const my = ++gridSeq, id = state.reqId, layer = state.layer, nh = state.model.n_head;
    const grid = $('head-grid');
    $('grid-layer').textContent = String(layer);
    grid.textContent = '';
    Object.assign(grid.dataset, { id, layer: String(layer), ready: '0' });
    const canvases = [];
    for (let h = 0; h < nh; h++) {
      const fig = document.createElement('figure');
      fig.dataset.head = String(h);
      const cv = document.createElement('canvas');
      cv.width = 1;
      cv.height = 1;
      cv.dataset.ready = '0';
      const cap = document.createElement('figcaption');
      cap.textContent = `head ${h}`;
      fig.append(cv, cap);
      fig.addEventListener('click', () => selectLayerHead(state.layer, h));
      grid.appendChild(fig);
      canvases.push(cv);
    }
    markGridActive();
    // one at a time: each map is computed on the scheduler thread, between generation steps
    for (let h = 0; h < nh; h++) {
      let a;
      try {
        a = await getAttention(id, layer, h);
      } catch (e) {
        if (my === gridSeq) showError(`GET /attention (layer ${layer}, head ${h})`, e);
        return;
      }
      if (my !== gridSeq) return;
      const cv = canvases[h];
      cv.width = a.n_tokens;
      cv.height = a.n_tokens;
      const ctx = cv.getContext('2d');
      ctx.putImageData(weightsImage(ctx, a), 0, 0);
      cv.dataset.ready = '1';
    }
    grid.dataset.ready = '1';
  }

  function markGridActive() {
    for (const fig of $('head-grid').children) fig.classList.toggle('active', Number(fig.dataset.head) === state.head);
  }

  function selectLayerHead(layer, head) {
    if (!state.model) return;
    const L = state.model.n_layer, H = state.model.n_head;
    layer = ((layer % L) + L) % L;
    head = ((head % H) + H) % H;
    const layerChanged = layer !== state.layer;
    state.layer = layer;
    state.head = head;
    $('layer').value = String(layer);
    $('head').value = String(head);
    markGridActive();
    markCensusActive();
    if (!state.reqId) return;
    loadHeatmap();
    if (layerChanged) loadGrid();
  }

  // ---- token strip ----------------------------------------------------------------------------

  function setTokens(a) {
    state.tokens = a.tokens;
    state.tokenIds = a.token_ids;
    const box = $('tokens');
    box.textContent = '';
    const frag = document.createDocumentFragment();
    a.tokens.forEach((t, i) => {
      const s = document.createElement('span');
      s.textContent = visible(t, 40);
      s.dataset.pos = String(i);
      s.title = `position ${i}, token id ${a.token_ids[i]}`;
      if (i >= state.nPrompt) s.classList.add('gen');
      frag.appendChild(s);
    });
    box.appendChild(frag);
  }

  function markTokenActive() {
    for (const s of $('tokens').querySelectorAll('span.active')) s.classList.remove('active');
    const s = $('tokens').querySelector(`span[data-pos="${state.lensPos}"]`);
    if (s) s.classList.add('active');
  }

  // ---- logit lens -----------------------------------------------------------------------------

  function setLensPos(pos, now) {
    if (pos === state.lensPos && !now) return;
    state.lensPos = pos;
    markTokenActive();
    clearTimeout(lensTimer);
    // hovering sweeps across many positions: ask only once the pointer rests
    lensTimer = setTimeout(loadLens, now ? 0 : 120);
  }

  function pinLens(pos) {
    state.lensPinned = !(state.lensPinned && state.lensPos === pos);
    setLensPos(pos, true);
  }

  const lensCache = new Map();
  async function loadLens() {
    const my = ++lensSeq, id = state.reqId, pos = state.lensPos, top = Number($('lens-top').value);
    if (!id || pos < 0) return;
    const table = $('lens');
    table.dataset.ready = '0';
    const key = `${id}/${pos}/${top}`;
    let lens = lensCache.get(key);
    if (!lens) {
      try {
        lens = await getJSON(`/logit_lens?id=${encodeURIComponent(id)}&pos=${pos}&top=${top}`);
      } catch (e) {
        if (my === lensSeq) showError(`GET /logit_lens (position ${pos})`, e);
        return;
      }
      lensCache.set(key, lens);
      if (lensCache.size > 256) lensCache.delete(lensCache.keys().next().value);
    }
    if (my !== lensSeq) return;
    drawLens(lens);
  }

  function drawLens(lens) {
    const table = $('lens'), body = table.tBodies[0];
    const next = lens.pos + 1 < state.tokenIds.length ? state.tokenIds[lens.pos + 1] : null;
    $('lens-title').textContent = `· position ${lens.pos}: ${visible(lens.token, 24)}` +
      (next !== null ? ` → actual next ${visible(state.tokens[lens.pos + 1], 24)}` : '') +
      (state.lensPinned ? ' (pinned: click again to release)' : '');
    let pmax = 0;
    for (const l of lens.layers) for (const e of l.top) pmax = Math.max(pmax, e[1]);
    const frag = document.createDocumentFragment();
    const head = document.createElement('tr');
    head.appendChild(Object.assign(document.createElement('th'), { textContent: 'layer' }));
    for (let k = 0; k < lens.top; k++) head.appendChild(Object.assign(document.createElement('th'), { textContent: `#${k + 1}` }));
    frag.appendChild(head);
    const last = lens.layers.length - 1;
    const firstTop = next === null ? -1 : lens.layers.findIndex((l) => l.top_ids[0] === next);
    if (firstTop >= 0) $('lens-title').textContent += ` · becomes the top prediction at layer ${lens.layers[firstTop].layer}`;
    lens.layers.forEach((l, li) => {
      const tr = document.createElement('tr');
      tr.dataset.layer = String(l.layer);
      if (li === firstTop) tr.classList.add('first-top');
      tr.appendChild(Object.assign(document.createElement('th'), {
        textContent: li === last ? `${l.layer} (output)` : String(l.layer) }));
      l.top.forEach(([piece, p], k) => {
        const td = document.createElement('td');
        const id = l.top_ids[k];
        td.dataset.id = String(id);
        td.dataset.prob = String(p);
        td.title = `token id ${id}, probability ${p}`;
        td.append(visible(piece, 20));
        const ps = document.createElement('span');
        ps.className = 'p';
        ps.textContent = p >= 0.001 ? `${(p * 100).toFixed(1)}%` : p.toExponential(1);
        td.appendChild(ps);
        td.style.background = `rgba(108, 182, 255, ${(0.55 * Math.sqrt(pmax > 0 ? p / pmax : 0)).toFixed(3)})`;
        if (id === next) td.classList.add('next');
        tr.appendChild(td);
      });
      frag.appendChild(tr);
    });
    body.textContent = '';
    body.appendChild(frag);
    Object.assign(table.dataset, { id: lens.id, pos: String(lens.pos), top: String(lens.top), ready: '1',
      firstTop: String(firstTop >= 0 ? lens.layers[firstTop].layer : -1) });
  }

  // ---- generation -----------------------------------------------------------------------------

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

  const chatMode = () => $('mode-chat').checked;

  async function generate(ev) {
    ev.preventDefault();
    if (state.generating) return;
    clearError();
    if (chatMode()) return chat();
    const body = { prompt: $('prompt').value, stream: true };
    if (!readSettings(body)) return;
    const ctl = new AbortController();
    state.generating = ctl;
    $('submit').disabled = true;
    $('stop').disabled = false;
    const comp = $('completion'), gen = document.createTextNode('');
    comp.dataset.state = 'running';
    delete comp.dataset.id;
    $('out-prompt').textContent = body.prompt;
    $('out-gen').textContent = '';
    $('out-gen').appendChild(gen);
    $('gen-status').textContent = 'generating…';
    let id = null, final = null, n = 0;
    try {
      const r = await api('/v1/generate', {
        method: 'POST', body: JSON.stringify(body), signal: ctl.signal,
        headers: { 'Content-Type': 'application/json' },
      });
      for await (const e of sseEvents(r)) {
        if (e.error) throw new ApiError(`${e.error.code} ${e.error.type}: ${e.error.message}`);
        if (e.id) id = e.id;
        if (e.text) gen.appendData(e.text);
        if (e.finish_reason) final = e;
        else $('gen-status').textContent = `${id} · ${++n} tokens…`;
      }
      if (!final) throw new ApiError('the stream ended without its final event');
      const u = final.usage, t = final.timings;
      $('gen-status').textContent = `${id} · finish: ${final.finish_reason} · ${u.prompt_tokens} prompt + ` +
        `${u.completion_tokens} generated tokens · ${t.generation_tokens_per_s.toFixed(1)} tokens/s`;
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
      state.generating = null;
      $('submit').disabled = false;
      $('stop').disabled = true;
    }
  }

  // ---- chat mode ------------------------------------------------------------------------------

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
    const ctl = new AbortController();
    state.generating = ctl;
    $('submit').disabled = true;
    $('stop').disabled = false;
    const comp = $('completion');
    comp.dataset.state = 'running';
    delete comp.dataset.id;
    chatBubble('user', text);
    const bubble = chatBubble('assistant', '');
    $('gen-status').textContent = 'generating…';
    let id = null, finish = null, usage = null, reply = '', n = 0;
    try {
      const r = await api('/v1/chat/completions', {
        method: 'POST', body: JSON.stringify(body), signal: ctl.signal,
        headers: { 'Content-Type': 'application/json' },
      });
      for await (const e of sseEvents(r)) {
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
      state.generating = null;
      $('submit').disabled = false;
      $('stop').disabled = true;
    }
  }

  // Shows the maps of a finished request.
  function showRequest(id, nPrompt) {
    state.reqId = id;
    state.nPrompt = nPrompt;
    state.tokens = [];
    state.lensPinned = false;
    state.lensPos = -1;
    $('heatmap').dataset.id = '';
    loadHeatmap().then(() => {
      if (state.reqId === id && state.tokens.length) setLensPos(Math.max(0, Math.min(nPrompt, state.tokens.length) - 1), true);
    });
    loadGrid();
  }

  // ---- head census: a layer x head grid coloured by each head's dominant role -------------------

  function censusScore(h) {
    return { induction: h.induction, 'previous-token': h.previous_token, 'first-token': h.first_token,
      self: h.self }[h.role];
  }

  function markCensusActive() {
    for (const td of $('census-grid').querySelectorAll('td')) {
      td.classList.toggle('active', Number(td.dataset.layer) === state.layer && Number(td.dataset.head) === state.head);
    }
  }

  function drawCensus(c) {
    const grid = $('census-grid'), body = grid.tBodies[0];
    const frag = document.createDocumentFragment(), top = document.createElement('tr');
    top.appendChild(document.createElement('th'));
    for (let h = 0; h < c.n_head; h++) top.appendChild(Object.assign(document.createElement('th'), { textContent: `head ${h}` }));
    frag.appendChild(top);
    for (let l = 0; l < c.n_layer; l++) {
      const tr = document.createElement('tr');
      tr.appendChild(Object.assign(document.createElement('th'), { textContent: `layer ${l}` }));
      for (let h = 0; h < c.n_head; h++) {
        const e = c.heads[l * c.n_head + h], score = censusScore(e);
        const td = document.createElement('td');
        td.className = `role-${e.role}`;
        td.style.setProperty('--s', (0.25 + 0.75 * Math.min(1, score === undefined ? 0.3 : score)).toFixed(3));
        td.textContent = e.role === 'diffuse' ? `L${l} H${h}\ndiffuse` : `L${l} H${h}\n${e.role} ${score.toFixed(2)}`;
        td.title = `${e.label} · previous-token ${e.previous_token.toFixed(3)} · induction ${e.induction.toFixed(3)} · ` +
          `first-token ${e.first_token.toFixed(3)} · self ${e.self.toFixed(3)} · entropy ${e.entropy.toFixed(2)} nats` +
          ` · KV head ${e.kv_head}`;
        Object.assign(td.dataset, { layer: String(l), head: String(h), role: e.role, label: e.label,
          induction: String(e.induction), previousToken: String(e.previous_token) });
        td.addEventListener('click', () => selectLayerHead(l, h));
        tr.appendChild(td);
      }
      frag.appendChild(tr);
    }
    body.textContent = '';
    body.appendChild(frag);
    const bi = c.best.induction, bp = c.best.previous_token;
    $('census-note').textContent = `· strongest induction L${bi.layer} H${bi.head} ${bi.score.toFixed(2)}, ` +
      `previous-token L${bp.layer} H${bp.head} ${bp.score.toFixed(2)}`;
    Object.assign(grid.dataset, { ready: '1', bestLayer: String(bi.layer), bestHead: String(bi.head),
      bestInduction: String(bi.score), prevLayer: String(bp.layer), prevHead: String(bp.head) });
    markCensusActive();
  }

  async function loadCensus() {
    let c;
    try {
      c = await getJSON('/heads');
    } catch (e) {
      $('census-note').textContent = '· census unavailable';
      showError('GET /heads', e);
      return;
    }
    drawCensus(c);
    // open on the strongest induction head (or, when the model has none, the strongest
    // previous-token head), showing it at work on a repeated phrase
    const bi = c.best.induction, bp = c.best.previous_token;
    const open = bi.score >= c.role_min ? bi : bp.score >= c.role_min ? bp : null;
    if (open && !state.reqId && !state.generating && !chatMode()) {
      $('census-grid').dataset.open = open === bi ? 'induction' : 'previous-token';
      $('prompt').value = REPEAT_PROMPT;
      $('temperature').value = '0';
      $('max_tokens').value = '8';
      selectLayerHead(open.layer, open.head);
      $('gen-form').requestSubmit();
    }
  }

  // ---- start ----------------------------------------------------------------------------------

  async function loadModel() {
    try {
      const j = await getJSON('/v1/models');
      const m = j.data[0];
      state.model = m;
      $('model-info').textContent = `${m.id} · ${m.arch} · ${m.n_layer} layers · ${m.n_head} heads ` +
        `(${m.n_head_kv} KV) · context ${m.context_length}`;
      $('model-info').dataset.ready = '1';
      fillSelect($('layer'), m.n_layer, Math.min(state.layer, m.n_layer - 1));
      fillSelect($('head'), m.n_head, Math.min(state.head, m.n_head - 1));
      clearError();
      loadCensus();
    } catch (e) {
      $('model-info').textContent = 'model info unavailable';
      showError('GET /v1/models', e);
    }
  }

  function start() {
    const saved = sessionStorage.getItem('attnd-api-key');
    if (saved) $('api-key').value = saved;
    $('api-key').addEventListener('change', () => {
      sessionStorage.setItem('attnd-api-key', $('api-key').value.trim());
      loadModel();
    });
    $('error-close').addEventListener('click', clearError);
    $('gen-form').addEventListener('submit', generate);
    $('mode-gen').addEventListener('change', setMode);
    $('mode-chat').addEventListener('change', setMode);
    $('chat-new').addEventListener('click', () => { state.chat = []; $('chat-log').textContent = ''; });
    $('stop').addEventListener('click', () => state.generating && state.generating.abort());
    $('layer').addEventListener('change', () => selectLayerHead(Number($('layer').value), state.head));
    $('head').addEventListener('change', () => selectLayerHead(state.layer, Number($('head').value)));
    $('lens-top').addEventListener('change', () => setLensPos(state.lensPos, true));
    const hm = $('heatmap');
    hm.addEventListener('mousemove', onHeatMove);
    hm.addEventListener('mouseleave', () => { $('tooltip').hidden = true; });
    hm.addEventListener('click', onHeatClick);
    const strip = $('tokens');
    strip.addEventListener('mouseover', (e) => {
      const p = e.target.dataset && e.target.dataset.pos;
      if (p !== undefined && !state.lensPinned) setLensPos(Number(p));
    });
    strip.addEventListener('click', (e) => {
      const p = e.target.dataset && e.target.dataset.pos;
      if (p !== undefined) pinLens(Number(p));
    });
    document.addEventListener('keydown', (e) => {
      const tag = e.target && e.target.tagName;
      if (tag === 'INPUT' || tag === 'TEXTAREA' || tag === 'SELECT' || e.ctrlKey || e.metaKey || e.altKey) return;
      let dl = 0, dh = 0;
      switch (e.key) {
        case 'ArrowLeft': case '[': dh = -1; break;
        case 'ArrowRight': case ']': dh = 1; break;
        case 'ArrowUp': dl = -1; break;
        case 'ArrowDown': dl = 1; break;
        default: return;
      }
      e.preventDefault();
      selectLayerHead(state.layer + dl, state.head + dh);
    });
    loadModel();
  }

  start();
})();
