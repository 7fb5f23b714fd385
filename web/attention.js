// attention.js - the attention view (GET /attention?id&layer&head): the heatmap of the chosen
// layer and head with its tooltip, the small maps of every head of that layer, the token strip,
// and the layer/head selection (selects, keyboard, clicks).
import { getJSON, showError } from './api.js';
import { pinLens, setLensPos } from './lens.js';
import { state } from './state.js';
import { $, visible } from './util.js';

let heatSeq = 0, gridSeq = 0;
const selectHooks = []; // run after the chosen layer/head changes (app.js adds the census')

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

// ---- heatmap ----------------------------------------------------------------------------------

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

// The token labels along both edges of the heatmap, every step-th token.
function drawLabels(ctx, labels, n, cell, margin, step) {
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
  drawLabels(ctx, labels, n, cell, margin, step);

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

// ---- head grid: every head of the chosen layer ------------------------------------------------

// The grid's empty figures, one per head (click selects it); returns their canvases.
function gridFigures(grid, nh) {
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
  return canvases;
}

async function loadGrid() {
  const my = ++gridSeq, id = state.reqId, layer = state.layer, nh = state.model.n_head;
  const grid = $('head-grid');
  $('grid-layer').textContent = String(layer);
  grid.textContent = '';
  Object.assign(grid.dataset, { id, layer: String(layer), ready: '0' });
  const canvases = gridFigures(grid, nh);
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

// ---- selection --------------------------------------------------------------------------------

// fn() runs whenever the chosen layer/head changes (state.layer, state.head).
export function onSelect(fn) {
  selectHooks.push(fn);
}

// Chooses layer and head (wrapping around), and shows their maps if a request is shown.
export function selectLayerHead(layer, head) {
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
  for (const fn of selectHooks) fn();
  if (!state.reqId) return;
  loadHeatmap();
  if (layerChanged) loadGrid();
}

// ---- token strip ------------------------------------------------------------------------------

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

// Shows the maps of a finished request (id, with nPrompt prompt tokens); the lens opens on its
// last prompt token.
export function showRequest(id, nPrompt) {
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

// Arrow keys and [ ] outside the form fields step through the layers and heads.
function onKey(e) {
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
}

// The view's controls: the layer and head selects, the heatmap's mouse, the keyboard.
export function initAttention() {
  $('layer').addEventListener('change', () => selectLayerHead(Number($('layer').value), state.head));
  $('head').addEventListener('change', () => selectLayerHead(state.layer, Number($('head').value)));
  const hm = $('heatmap');
  hm.addEventListener('mousemove', onHeatMove);
  hm.addEventListener('mouseleave', () => { $('tooltip').hidden = true; });
  hm.addEventListener('click', onHeatClick);
  document.addEventListener('keydown', onKey);
}
