// app.js - the attnd playground's entry module: streamed completions, the head census, attention
// heatmaps and the logit lens. Plain browser ES modules, no framework, no build step, no
// requests anywhere but this daemon (which serves every file of web/ by name).
//
// Modules: util.js (DOM/text helpers), state.js (what the views share), api.js (fetch with the
// API key, errors, SSE), prompt.js (completion and chat), attention.js (heatmap, head grid,
// token strip, layer/head selection), lens.js (logit lens), census.js (head census); this file
// wires them and loads the model's info.
//
// Data flow: POST /v1/generate (SSE), or in chat mode POST /v1/chat/completions (SSE chunks) ->
// the finished request's id -> GET /attention?id&layer&head (heatmap, head grid, token strip) and
// GET /logit_lens?id&pos (lens table). GET /heads (the head census) fills the layer x head grid;
// the page opens on the strongest induction head (else the strongest previous-token head) with a
// prompt that repeats a phrase, generated greedily.
// Elements carry data-* attributes describing what they show (ids, positions, weights), which
// the browser tests (tests/browser/test_playground.mjs, test_heads.mjs) read back.
import { clearError, getJSON, initApi, showError } from './api.js';
import { initAttention, onSelect } from './attention.js';
import { initCensus, loadCensus, markCensusActive } from './census.js';
import { initLens } from './lens.js';
import { initPrompt } from './prompt.js';
import { state } from './state.js';
import { $, fillSelect } from './util.js';

// GET /v1/models: the header line and the layer/head selects, then the census.
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

initApi(loadModel);
initPrompt();
initCensus();
initAttention();
initLens();
onSelect(markCensusActive);
loadModel();
