// test_playground.mjs - drives the playground page (GET /) of a running attnd daemon in a real
// browser (Debian's chromium through playwright-core) and checks what it shows against the JSON
// endpoints. Started by tests/integration/test_playground.sh, which starts the daemon.
//   node test_playground.mjs BASE_URL OUT_DIR [DOC_SHOT.png]
// Exit 0 pass, 1 fail. Screenshots go to OUT_DIR (and a copy of the page to DOC_SHOT if given).
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { api as apiAt, checker, openBrowser } from './common.mjs';

const [base, outDir, docShot] = process.argv.slice(2);
if (!base || !outDir) {
  console.error('usage: node test_playground.mjs BASE_URL OUT_DIR [DOC_SHOT.png]');
  process.exit(1);
}
mkdirSync(outDir, { recursive: true });

const c = checker(), check = c.check;
const api = (path, body) => apiAt(base, path, body);

const T = 60000; // generous: the daemon computes maps on 2 shared cores
let session;
try {
  // ---- the files themselves ------------------------------------------------------------------
  for (const [path, type] of [['/', 'text/html'], ['/index.html', 'text/html'], ['/app.js', 'text/javascript'],
    ['/style.css', 'text/css']]) {
    const r = await api(path);
    check(r.status === 200 && r.ctype.startsWith(type), `GET ${path}: ${r.status} ${r.ctype}`);
  }
  // the page is ES modules (<script type="module">): every module app.js imports, and theirs, is
  // served as JavaScript from this daemon (a browser refuses a module of any other type)
  const seen = new Set(['app.js']), todo = ['app.js'];
  while (todo.length) {
    const r = await api('/' + todo.pop());
    for (const m of r.text.matchAll(/^import\b[^;]*?\bfrom\s+'\.\/([A-Za-z0-9_-]+\.js)'/gm)) {
      if (!seen.has(m[1])) { seen.add(m[1]); todo.push(m[1]); }
    }
  }
  for (const f of seen) {
    const r = await api('/' + f);
    check(r.status === 200 && r.ctype.startsWith('text/javascript'), `GET /${f}: ${r.status} ${r.ctype}`);
  }
  check(seen.size >= 6, `app.js imports the view modules: ${[...seen].join(' ')}`);
  const nf = await api('/nope.js');
  check(nf.status === 404 && nf.json && nf.json.error && nf.json.error.code === 404, `GET /nope.js: ${nf.status} ${nf.text}`);
  const model = (await api('/v1/models')).json.data[0];

  session = await openBrowser(base);
  const { page, pageErrors, foreign } = session;

  await page.goto(base + '/');
  await page.waitForSelector('#model-info[data-ready="1"]', { timeout: T });
  check((await page.textContent('#model-info')).includes(model.id), 'model info names the model');
  check(await page.locator('#layer option').count() === model.n_layer, 'one layer option per layer');
  check(await page.locator('#head option').count() === model.n_head, 'one head option per head');

  // ---- a streamed completion equals the non-streamed one ------------------------------------
  const req = { prompt: 'Once upon a time, there was a little robot who', max_tokens: 24, temperature: 0,
    top_k: 40, top_p: 0.95, seed: 7 };
  await page.fill('#prompt', req.prompt);
  for (const k of ['max_tokens', 'temperature', 'top_k', 'top_p', 'seed']) await page.fill(`#${k}`, String(req[k]));
  await page.click('#submit');
  await page.waitForSelector('#completion[data-state="done"]', { timeout: T });
  const streamed = await page.evaluate(() => document.getElementById('out-gen').textContent);
  const id = await page.getAttribute('#completion', 'data-id');
  const plain = await api('/v1/generate', req);
  check(plain.status === 200, `non-stream generate: ${plain.status} ${plain.text.slice(0, 200)}`);
  check(streamed === plain.json.text, `streamed text ${JSON.stringify(streamed)} != ${JSON.stringify(plain.json.text)}`);
  check(/^gen-[0-9a-f]{32}$/.test(id || ''), `request id ${id}`);

  // ---- heatmap: layer 0 head 0 first, then keyboard to layer 1 head 3 -------------------------
  await page.waitForSelector(`#heatmap[data-ready="1"][data-id="${id}"]`, { timeout: T });
  const L = Math.min(1, model.n_layer - 1), H = Math.min(3, model.n_head - 1);
  await page.focus('#heatmap');
  for (let l = 0; l < L; l++) await page.keyboard.press('ArrowDown');
  for (let h = 0; h < H; h++) await page.keyboard.press(']');
  await page.keyboard.press('ArrowRight');
  await page.keyboard.press('[');
  await page.waitForSelector(`#heatmap[data-ready="1"][data-layer="${L}"][data-head="${H}"]`, { timeout: T });
  check(await page.inputValue('#layer') === String(L) && await page.inputValue('#head') === String(H),
    'the selects follow the keyboard');
  const attn = (await api(`/attention?id=${id}&layer=${L}&head=${H}`)).json;
  const n = attn.n_tokens;
  check(n === plain.json.usage.prompt_tokens + plain.json.usage.completion_tokens, `attention n_tokens ${n}`);
  check(JSON.stringify(attn.token_ids.slice(-plain.json.tokens.length)) === JSON.stringify(plain.json.tokens),
    'the request the page made generated the same tokens as the non-stream one');

  const hm = page.locator('#heatmap');
  await hm.scrollIntoViewIfNeeded();
  const geom = await page.evaluate(() => {
    const c = document.getElementById('heatmap');
    return { cell: Number(c.dataset.cell), margin: Number(c.dataset.margin), n: Number(c.dataset.n) };
  });
  check(geom.n === n, `heatmap has ${geom.n} rows, want ${n}`);
  const cells = [[0, 0], [n - 1, 0], [n - 1, n - 1], [Math.floor(n / 2), Math.floor(n / 3)], [5, 2], [n - 2, n - 5]];
  for (const [i, j] of cells) {
    const box = await hm.boundingBox();
    await page.mouse.move(box.x + geom.margin + (j + 0.5) * geom.cell, box.y + geom.margin + (i + 0.5) * geom.cell);
    await page.waitForSelector(`#tooltip:not([hidden])[data-i="${i}"][data-j="${j}"]`, { timeout: 5000 }).catch(() => {});
    const tip = await page.evaluate(() => {
      const t = document.getElementById('tooltip');
      return { hidden: t.hidden, i: t.dataset.i, j: t.dataset.j, w: t.dataset.weight, text: t.textContent };
    });
    const want = attn.weights[i][j];
    check(!tip.hidden && tip.i === String(i) && tip.j === String(j) && Number(tip.w) === want &&
      tip.text.includes(want.toPrecision(6)), `hover (${i},${j}): tooltip ${JSON.stringify(tip)}, want weight ${want}`);
  }
  // the pixel of a cell has the colour of its weight's brightness class: the diagonal's first cell (weight 1) is bright
  const px = await page.evaluate(({ cell, margin }) => {
    const c = document.getElementById('heatmap');
    return Array.from(c.getContext('2d').getImageData(margin + cell / 2, margin + cell / 2, 1, 1).data);
  }, geom);
  check(px[0] > 200 && px[1] > 200, `cell (0,0) with weight 1 drawn bright: rgba ${px}`);
  await hm.screenshot({ path: join(outDir, 'heatmap.png') });

  // ---- head grid --------------------------------------------------------------------------
  await page.waitForSelector(`#head-grid[data-ready="1"][data-layer="${L}"]`, { timeout: T });
  check(await page.locator('#head-grid canvas[data-ready="1"]').count() === model.n_head, 'one small map per head');
  check(await page.locator('#head-grid figure.active').getAttribute('data-head') === String(H), 'grid marks the chosen head');

  // ---- logit lens: hover a token of the strip, then a heatmap row -------------------------------
  async function checkLens(pos, how) {
    await page.waitForSelector(`#lens[data-ready="1"][data-pos="${pos}"]`, { timeout: T });
    const rows = await page.evaluate(() => Array.from(document.querySelectorAll('#lens tr[data-layer]')).map((tr) => ({
      layer: Number(tr.dataset.layer),
      ids: Array.from(tr.querySelectorAll('td')).map((td) => Number(td.dataset.id)),
      probs: Array.from(tr.querySelectorAll('td')).map((td) => Number(td.dataset.prob)),
      text: Array.from(tr.querySelectorAll('td')).map((td) => td.firstChild.textContent),
    })));
    const lens = (await api(`/logit_lens?id=${id}&pos=${pos}&top=5`)).json;
    check(lens && rows.length === model.n_layer && rows.length === lens.layers.length, `${how}: ${rows.length} lens rows`);
    for (const [k, row] of rows.entries()) {
      const l = lens.layers[k];
      check(row.layer === l.layer && JSON.stringify(row.ids) === JSON.stringify(l.top_ids) &&
        row.probs.every((p, q) => p === l.top[q][1]), `${how}: lens row ${k} ${JSON.stringify(row)} != ${JSON.stringify(l)}`);
    }
    return lens;
  }
  const strip = page.locator(`#tokens span[data-pos="3"]`);
  await strip.scrollIntoViewIfNeeded();
  await strip.hover();
  await checkLens(3, 'token strip hover');
  const rowI = n - 3;
  {
    await hm.scrollIntoViewIfNeeded();
    const box = await hm.boundingBox();
    await page.mouse.move(box.x + geom.margin + 0.5 * geom.cell, box.y + geom.margin + (rowI + 0.5) * geom.cell);
    await page.mouse.click(box.x + geom.margin + 0.5 * geom.cell, box.y + geom.margin + (rowI + 0.5) * geom.cell);
  }
  const lens = await checkLens(rowI, 'heatmap row click');
  // the lens' last layer is the real next-token distribution: the greedy token after rowI is its top 1
  check(lens.layers[lens.layers.length - 1].top_ids[0] === attn.token_ids[rowI + 1],
    `greedy next token ${attn.token_ids[rowI + 1]} is the last layer's top entry`);
  check(await page.locator('#lens td.next').count() >= 1, 'the actual next token is marked in the lens');
  await page.locator('#lens').screenshot({ path: join(outDir, 'lens.png') });
  await page.mouse.move(0, 0);
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: join(outDir, 'page.png'), fullPage: true });
  if (docShot) {
    await page.screenshot({ path: docShot, fullPage: true });
  }

  // ---- a prompt of a few hundred tokens stays usable ------------------------------------------
  const long = Array.from({ length: 40 }, (_, k) => `Sentence ${k} tells the robot to look again.`).join(' ');
  await page.fill('#prompt', long);
  await page.fill('#max_tokens', '8');
  const t0 = Date.now();
  await page.click('#submit');
  await page.waitForSelector('#completion[data-state="done"]', { timeout: T });
  const id2 = await page.getAttribute('#completion', 'data-id');
  await page.waitForSelector(`#heatmap[data-ready="1"][data-id="${id2}"]`, { timeout: T });
  await page.waitForSelector(`#head-grid[data-ready="1"][data-id="${id2}"]`, { timeout: T });
  const n2 = Number(await page.getAttribute('#heatmap', 'data-n'));
  const renderMs = Number(await page.getAttribute('#heatmap', 'data-render-ms'));
  // the page answers a script call promptly while idle: nothing left blocking the main thread
  const t1 = Date.now();
  await page.evaluate(() => 1);
  const evalMs = Date.now() - t1;
  check(n2 >= 300, `long prompt has ${n2} tokens`);
  check(renderMs < 1500 && evalMs < 1000, `heatmap of ${n2} tokens drawn in ${renderMs} ms, page answered in ${evalMs} ms`);
  console.log(`long prompt: ${n2} tokens, generated + mapped in ${Date.now() - t0} ms, heatmap drawn in ${renderMs} ms`);
  await page.screenshot({ path: join(outDir, 'long.png'), fullPage: true });

  // ---- chat mode: two turns through /v1/chat/completions, maps of the chat's id ----------------
  await page.check('#mode-chat');
  const chatSettings = { max_tokens: 8, temperature: 0, top_k: 40, top_p: 0.95, seed: 7 };
  const convo = [];
  for (const text of ['Hello there', 'And then?']) {
    await page.fill('#prompt', text);
    await page.click('#submit');
    await page.waitForSelector('#completion[data-state="done"]', { timeout: T });
    const shown = await page.evaluate(() => Array.from(document.querySelectorAll('#chat-log .msg')).map((d) =>
      ({ role: d.dataset.role, content: d.textContent })));
    convo.push({ role: 'user', content: text });
    const ref = await api('/v1/chat/completions', { messages: convo, ...chatSettings });
    check(ref.status === 200, `chat: ${ref.status} ${ref.text.slice(0, 200)}`);
    const reply = ref.json.choices[0].message.content;
    convo.push({ role: 'assistant', content: reply });
    check(JSON.stringify(shown) === JSON.stringify(convo), `chat log ${JSON.stringify(shown)} != ${JSON.stringify(convo)}`);
    const cid = await page.getAttribute('#completion', 'data-id');
    check(/^chatcmpl-[0-9a-f]{32}$/.test(cid || ''), `chat id ${cid}`);
    await page.waitForSelector(`#heatmap[data-ready="1"][data-id="${cid}"]`, { timeout: T });
    const ca = (await api(`/attention?id=${cid}&layer=0&head=0`)).json;
    check(ca.n_tokens === ref.json.usage.prompt_tokens + ref.json.usage.completion_tokens, `chat map has ${ca.n_tokens} tokens`);
  }
  await page.screenshot({ path: join(outDir, 'chat.png'), fullPage: true });
  await page.check('#mode-gen');

  // ---- an API error shows as a readable message ----------------------------------------------
  await page.fill('#prompt', 'hello');
  await page.fill('#temperature', '500');
  await page.click('#submit');
  await page.waitForSelector('#error:not([hidden])', { timeout: T });
  const err = await page.textContent('#error-text');
  const direct = (await api('/v1/generate', { prompt: 'hello', temperature: 500 })).json;
  check(err.includes('400') && err.includes(direct.error.message), `error banner "${err}" (daemon says "${direct.error.message}")`);
  check(await page.getAttribute('#completion', 'data-state') === 'error', 'completion marked failed');
  await page.screenshot({ path: join(outDir, 'error.png') });
  await page.click('#error-close');
  check(await page.locator('#error').isHidden(), 'the banner can be dismissed');

  check(pageErrors.length === 0, `script errors: ${pageErrors.join(' | ')}`);
  check(foreign.length === 0, `requests to other hosts: ${foreign.join(' ')}`);
} catch (e) {
  check(false, `exception: ${e && e.stack ? e.stack : e}`);
} finally {
  if (session) await session.close();
}
console.log(`test_playground: ${c.checks} checks, ${c.failures} failures`);
process.exit(c.failures ? 1 : 0);
