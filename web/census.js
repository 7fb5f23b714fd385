// census.js - the head census (GET /heads): a layer x head grid coloured by each head's dominant
// role; a click opens that head's maps. The page opens on the strongest induction head (else the
// strongest previous-token head) with a prompt that repeats a phrase (REPEAT_PROMPT), greedily.
import { getJSON, showError } from './api.js';
import { selectLayerHead } from './attention.js';
import { chatMode } from './prompt.js';
import { state } from './state.js';
import { $ } from './util.js';

// a made-up phrase (not in the corpus) said twice: the second time only copying predicts it
const REPEAT_PROMPT = 'Jonah and Boaz saw seven white horses near Tarshish. Jonah and Boaz saw seven white horses near Tarshish.';

function censusScore(h) {
  return { induction: h.induction, 'previous-token': h.previous_token, 'first-token': h.first_token,
    self: h.self }[h.role];
}

// Marks the grid's cell of the chosen layer and head (state.layer, state.head).
export function markCensusActive() {
  for (const td of $('census-grid').querySelectorAll('td')) {
    td.classList.toggle('active', Number(td.dataset.layer) === state.layer && Number(td.dataset.head) === state.head);
  }
}

// The grid's cell of head h of layer l (census entry e).
function censusCell(e, l, h) {
  const score = censusScore(e);
  const td = document.createElement('td');
  td.className = `role-${e.role}`;
  td.style.setProperty('--s', (0.25 + 0.75 * Math.min(1, score === undefined ? 0.3 : score)).toFixed(3));
  td.textContent = e.role === 'diffuse' ? `L${l} H${h}\ndiffuse` : `L${l} H${h}\n${e.role} ${score.toFixed(2)}`;
  td.title = `${e.label} · previous-token ${e.previous_token.toFixed(3)} · induction ${e.induction.toFixed(3)} · ` +
    `first-token ${e.first_token.toFixed(3)} · self ${e.self.toFixed(3)} · entropy ${e.entropy.toFixed(2)} nats` +
    ` · KV head ${e.kv_head}`;
  Object.assign(td.dataset, { layer: String(l), head: String(h), role: e.role, label: e.label,
    induction: String(e.induction), previousToken: String(e.previous_token) });
  td.addEventListener('click', (ev) => ($('ablate-mode').checked ? toggleHead(l, h, ev.shiftKey ? 2 : 0) : selectLayerHead(l, h)));
  return td;
}

// Intervene mode: sets head h of layer l to scale (a second click with the same scale restores it).
function toggleHead(l, h, scale) {
  const k = `${l}:${h}`;
  if (state.scales.get(k) === scale) state.scales.delete(k);
  else state.scales.set(k, scale);
  markInterventions();
}

// The grid's cells and the list beside it show state.scales.
function markInterventions() {
  for (const td of $('census-grid').querySelectorAll('td')) {
    const s = state.scales.get(`${td.dataset.layer}:${td.dataset.head}`);
    td.classList.toggle('ablated', s === 0);
    td.classList.toggle('doubled', s === 2);
    if (s === undefined) delete td.dataset.scale;
    else td.dataset.scale = String(s);
  }
  const list = [...state.scales].map(([k, s]) => `L${k.replace(':', ' H')} x${s}`);
  $('iv-list').textContent = list.length ? `· ${list.join(', ')}` : '';
}

export function initCensus() {
  $('iv-clear').addEventListener('click', () => { state.scales.clear(); markInterventions(); });
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
    for (let h = 0; h < c.n_head; h++) tr.appendChild(censusCell(c.heads[l * c.n_head + h], l, h));
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

// Fetches and draws the census; unless something is already shown, opens on its best head.
export async function loadCensus() {
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
