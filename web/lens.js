// lens.js - the logit lens (GET /logit_lens?id&pos&top): each layer's top predictions at one
// position of the request, chosen by hovering (or clicking, which pins it) a heatmap row or a
// token of the strip.
import { getJSON, showError } from './api.js';
import { state } from './state.js';
import { $, visible } from './util.js';

let lensSeq = 0, lensTimer = 0;
const lensCache = new Map(); // "id/pos/top" -> the /logit_lens answer

function markTokenActive() {
  for (const s of $('tokens').querySelectorAll('span.active')) s.classList.remove('active');
  const s = $('tokens').querySelector(`span[data-pos="${state.lensPos}"]`);
  if (s) s.classList.add('active');
}

// Shows the lens at pos: at once if now, else once the pointer rests there.
export function setLensPos(pos, now) {
  if (pos === state.lensPos && !now) return;
  state.lensPos = pos;
  markTokenActive();
  clearTimeout(lensTimer);
  // hovering sweeps across many positions: ask only once the pointer rests
  lensTimer = setTimeout(loadLens, now ? 0 : 120);
}

// Pins the lens to pos (hovering no longer moves it), or releases it if it is pinned there.
export function pinLens(pos) {
  state.lensPinned = !(state.lensPinned && state.lensPos === pos);
  setLensPos(pos, true);
}

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

// One cell of the lens: the piece, its probability, shaded by it (pmax: the table's largest).
function lensCell(piece, p, id, pmax, next) {
  const td = document.createElement('td');
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
  return td;
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
    l.top.forEach(([piece, p], k) => tr.appendChild(lensCell(piece, p, l.top_ids[k], pmax, next)));
    frag.appendChild(tr);
  });
  body.textContent = '';
  body.appendChild(frag);
  Object.assign(table.dataset, { id: lens.id, pos: String(lens.pos), top: String(lens.top), ready: '1',
    firstTop: String(firstTop >= 0 ? lens.layers[firstTop].layer : -1) });
}

// The lens' controls: its top-N select, and the token strip (hover shows, click pins).
export function initLens() {
  $('lens-top').addEventListener('change', () => setLensPos(state.lensPos, true));
  const strip = $('tokens');
  strip.addEventListener('mouseover', (e) => {
    const p = e.target.dataset && e.target.dataset.pos;
    if (p !== undefined && !state.lensPinned) setLensPos(Number(p));
  });
  strip.addEventListener('click', (e) => {
    const p = e.target.dataset && e.target.dataset.pos;
    if (p !== undefined) pinLens(Number(p));
  });
}
