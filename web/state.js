// state.js - what the views share: the model, the request the maps show, the chosen layer and
// head, the logit lens position and the running generation. One object, read and written by
// the view modules (attention.js, lens.js, prompt.js, census.js, app.js).

export const state = {
  model: null,        // /v1/models data[0]: n_layer, n_head, ... (app.js)
  reqId: null,        // the request the maps show ("gen-N") (attention.js showRequest)
  nPrompt: 0,         // its prompt tokens
  tokens: [],         // its token pieces (from /attention)
  tokenIds: [],
  layer: 0,
  head: 0,
  attn: null,         // the /attention answer the heatmap shows
  geom: null,         // heatmap geometry: {n, cell, margin}
  lensPos: -1,
  lensPinned: false,
  generating: null,   // AbortController of the running generation (prompt.js)
  chat: [],           // chat mode: the conversation so far, [{role, content}]
  scales: new Map(),  // interventions on heads: "layer:head" -> scale (0 knocks it out, 2 doubles it) (census.js)
};

// The interventions the next Generate sends: one head_scale per entry of state.scales, or [].
export function headInterventions() {
  return [...state.scales].map(([k, scale]) => {
    const [layer, head] = k.split(':').map(Number);
    return { kind: 'head_scale', layer, head, scale };
  });
}
