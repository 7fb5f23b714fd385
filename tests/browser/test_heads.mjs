// test_heads.mjs - the head census in the playground, on the shipped model (models/kjv.gguf):
// the layer x head grid matches GET /heads, the page opens on the strongest induction head with
// a prompt that repeats a phrase, and after clicking that head in the grid the heatmap's
// brightest cell in each row of the phrase's second copy is the column of the token after the
// earlier occurrence (read from the canvas pixels). A model without an induction head (census
// score under role_min) opens on its strongest previous-token head instead, and then the
// brightest cell of each row must be the previous token. Started by tests/integration/test_playground.sh.
//   node test_heads.mjs BASE_URL OUT_DIR [SHOT.png]
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { api as apiAt, checker, openBrowser } from './common.mjs';

const [base, outDir, shot] = process.argv.slice(2);
if (!base || !outDir) {
  console.error('usage: node test_heads.mjs BASE_URL OUT_DIR [SHOT.png]');
  process.exit(1);
}
mkdirSync(outDir, { recursive: true });
const c = checker(), check = c.check;
const T = 120000; // the census and the maps are computed on 2 shared cores

// rows i of a repeated span: (ids[i-1], ids[i]) occurred before at (j-1, j); expects column j+1
function copyRows(ids) {
  const rows = [];
  for (let i = 2; i < ids.length; i++) {
    for (let j = i - 2; j >= 1; j--) {
      if (ids[j] === ids[i] && ids[j - 1] === ids[i - 1] && j + 1 < i) {
        rows.push([i, j + 1]);
        break;
      }
    }
  }
  return rows;
}

// The generated text of the completion shown now (the prompt repeats a phrase: a copy of its
// second half is the induction heads' work).
const shown = (page) => page.textContent('#out-gen');

// Knock out every head the census calls induction (real clicks in intervene mode), Generate: the
// continuation must stop copying the earlier copy, the plain run beside it must still copy, and
// the answer must say it ran under the interventions; "Restore all" and Generate bring the copy back.
async function ablation(page, census) {
  const copied = await shown(page);
  const phrase = (await page.inputValue('#prompt')).split('. ')[0]; // "Jonah and Boaz saw ..."
  check(phrase.startsWith(copied.trim().split(' ').slice(0, 3).join(' ')), `plain run copies: '${copied}'`);
  await page.check('#ablate-mode');
  const heads = census.heads.map((h, i) => [h, Math.floor(i / census.n_head), i % census.n_head])
    .filter(([h]) => h.role === 'induction');
  for (const [, l, h] of heads) await page.click(`#census-grid td[data-layer="${l}"][data-head="${h}"]`);
  check(await page.locator('#census-grid td.ablated').count() === heads.length, `${heads.length} heads marked knocked out`);
  await page.click('#submit');
  await page.waitForSelector('#completion[data-state="done"]', { timeout: T });
  await page.waitForSelector('#plain[data-state="done"]', { timeout: T });
  const ablated = await shown(page), plain = await page.textContent('#plain-gen');
  console.log(`induction heads ${heads.map(([, l, h]) => `L${l}H${h}`).join(' ')} knocked out: '${ablated}' (plain: '${copied}')`);
  check(!ablated.startsWith(copied.slice(0, 12)), `still copies with the induction heads knocked out: '${ablated}'`);
  check(plain.endsWith(copied), `the plain run beside it copies: '${plain}'`);
  check(/4 interventions|\d+ interventions/.test(await page.textContent('#gen-status')), 'the status says interventions ran');
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: join(outDir, 'ablation.png'), fullPage: true });
  if (process.env.ABLATION_SHOT) await page.screenshot({ path: process.env.ABLATION_SHOT, fullPage: true });
  await page.click('#iv-clear');
  check(await page.locator('#census-grid td.ablated').count() === 0, 'restore all clears the marks');
  await page.click('#submit');
  await page.waitForSelector('#completion[data-state="done"]', { timeout: T });
  check(await shown(page) === copied, `restored: copies again: '${await shown(page)}'`);
  check(await page.isHidden('#plain'), 'no plain run beside a plain run');
}

let session;
try {
  const census = (await apiAt(base, '/heads')).json;
  const induction = census.best.induction.score >= census.role_min;
  const best = induction ? census.best.induction : census.best.previous_token;
  console.log(`opens on the strongest ${induction ? 'induction' : 'previous-token'} head L${best.layer} H${best.head} ` +
    `(${best.score.toFixed(3)}; strongest induction ${census.best.induction.score.toFixed(3)})`);
  session = await openBrowser(base);
  const { page, pageErrors, foreign } = session;
  await page.goto(base + '/');
  await page.waitForSelector('#census-grid[data-ready="1"]', { timeout: T });
  const cells = await page.locator('#census-grid td').count();
  check(cells === census.n_layer * census.n_head, `${cells} census cells for ${census.n_layer} x ${census.n_head} heads`);
  const label = await page.getAttribute(`#census-grid td[data-layer="${best.layer}"][data-head="${best.head}"]`, 'data-label');
  check(label === census.heads[best.layer * census.n_head + best.head].label, `cell label ${label}`);
  const bi = census.best.induction;
  check(Number(await page.getAttribute('#census-grid', 'data-best-layer')) === bi.layer &&
    Number(await page.getAttribute('#census-grid', 'data-best-head')) === bi.head, 'strongest induction head marked');

  // the page opens on that head with a repeated phrase, generated greedily
  await page.waitForSelector('#completion[data-state="done"]', { timeout: T });
  const id = await page.getAttribute('#completion', 'data-id');
  await page.waitForSelector(`#heatmap[data-ready="1"][data-id="${id}"]`, { timeout: T });
  check(Number(await page.getAttribute('#heatmap', 'data-layer')) === best.layer &&
    Number(await page.getAttribute('#heatmap', 'data-head')) === best.head, 'opens on the strongest head');
  check(await page.getAttribute('#census-grid', 'data-open') === (induction ? 'induction' : 'previous-token'),
    'the page says which head it opened on');

  // click another head, then the strongest induction head in the grid
  const other = best.head === 0 ? 1 : 0;
  await page.click(`#census-grid td[data-layer="${best.layer}"][data-head="${other}"]`);
  await page.waitForSelector(`#heatmap[data-ready="1"][data-head="${other}"]`, { timeout: T });
  await page.click(`#census-grid td[data-layer="${best.layer}"][data-head="${best.head}"]`);
  await page.waitForSelector(`#heatmap[data-ready="1"][data-layer="${best.layer}"][data-head="${best.head}"]`, { timeout: T });
  check(await page.locator('#census-grid td.active').getAttribute('data-head') === String(best.head), 'clicked cell active');

  const attn = (await apiAt(base, `/attention?id=${id}&layer=${best.layer}&head=${best.head}`)).json;
  // induction: rows of the second copy, column after the earlier occurrence; else every row, column i-1
  const rows = induction ? copyRows(attn.token_ids) : attn.token_ids.slice(2).map((_, k) => [k + 2, k + 1]);
  // brightest cell of each such row, from the drawn canvas (cell centres, sum of RGB). For an
  // induction head the first-token column is left out: the shipped model's strongest one parks
  // there (its first-token score is 0.6) where the next token needs no copying - after common
  // words like 'and' - and copies where it does, so its brightest cell off the sink is the test
  const from = induction ? 1 : 0;
  const bright = await page.evaluate(([rs, j0]) => {
    const cv = document.getElementById('heatmap'), ctx = cv.getContext('2d');
    const cell = Number(cv.dataset.cell), m = Number(cv.dataset.margin);
    return rs.map(([i]) => {
      let bestJ = -1, bestV = -1;
      for (let j = j0; j <= i; j++) {
        const d = ctx.getImageData(Math.floor(m + (j + 0.5) * cell), Math.floor(m + (i + 0.5) * cell), 1, 1).data;
        const v = d[0] + d[1] + d[2];
        if (v > bestV) { bestV = v; bestJ = j; }
      }
      return bestJ;
    });
  }, [rows, from]);
  const hits = rows.filter(([, want], k) => bright[k] === want).length;
  if (induction) {
    console.log(`L${best.layer} H${best.head}: the brightest cell (off the first token) is the token after the earlier occurrence in ` +
      `${hits} of ${rows.length} second-copy rows`);
    check(rows.length >= 5, `the repeated-phrase prompt gives ${rows.length} second-copy rows`);
    check(hits >= 0.8 * rows.length, `brightest cell on the induction target in only ${hits}/${rows.length} rows`);
  } else {
    // a previous-token head: i-1 is the most frequent position of a row's brightest cell
    const offsets = new Map();
    rows.forEach(([i], k) => offsets.set(i - bright[k], (offsets.get(i - bright[k]) || 0) + 1));
    const mode = [...offsets.entries()].sort((a, b) => b[1] - a[1])[0];
    console.log(`L${best.layer} H${best.head}: the brightest cell is the previous token in ${hits} of ` +
      `${rows.length} rows; offsets of the brightest cell: ${JSON.stringify([...offsets.entries()])}`);
    check(mode[0] === 1 && hits >= 0.3 * rows.length, `previous token is not the usual brightest cell: ${mode}`);
  }

  // logit lens at the last prompt token: the layer where the copied continuation becomes top-1
  await page.waitForSelector(`#lens[data-ready="1"][data-id="${id}"]`, { timeout: T });
  const firstTop = Number(await page.getAttribute('#lens', 'data-first-top'));
  console.log(`logit lens: the continuation becomes the top prediction at layer ${firstTop}`);
  check(firstTop >= 0, 'the continuation is the top prediction at some layer');

  await page.mouse.move(0, 0);
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: join(outDir, 'heads.png'), fullPage: true });
  if (shot) await page.screenshot({ path: shot, fullPage: true });
  if (induction) await ablation(page, census);
  check(pageErrors.length === 0, `script errors: ${pageErrors.join(' | ')}`);
  check(foreign.length === 0, `requests to other hosts: ${foreign.join(' ')}`);
} catch (e) {
  check(false, `exception: ${e && e.stack ? e.stack : e}`);
} finally {
  if (session) await session.close();
}
console.log(`test_heads (browser): ${c.checks} checks, ${c.failures} failures`);
process.exit(c.failures ? 1 : 0);
