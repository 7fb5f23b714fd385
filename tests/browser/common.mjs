// common.mjs - what the browser tests share: a check counter, a JSON fetch helper and a
// headless chromium (Debian's, through playwright-core) on a fresh profile that records script
// errors and requests to other hosts.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

export function checker() {
  const c = { checks: 0, failures: 0 };
  c.check = (cond, msg) => {
    c.checks++;
    if (!cond) {
      c.failures++;
      console.log(`FAIL ${msg}`);
    }
    return cond;
  };
  return c;
}

// fetch(base + path), GET or (with body) POST JSON: {status, ctype, text, json}
export async function api(base, path, body) {
  const r = await fetch(base + path, body === undefined ? {} : {
    method: 'POST', body: JSON.stringify(body), headers: { 'Content-Type': 'application/json' } });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (_) { /* not JSON */ }
  return { status: r.status, ctype: r.headers.get('content-type') || '', text, json };
}

// {browser, page, pageErrors, foreign, close()}: close() also removes the profile
export async function openBrowser(base) {
  const profile = mkdtempSync(join(tmpdir(), 'attnd-chromium-'));
  // a fresh profile (--user-data-dir): playwright passes it for a persistent context
  const browser = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--disable-quic'],
    viewport: { width: 1280, height: 1000 },
  });
  const page = browser.pages()[0] || await browser.newPage();
  const pageErrors = [], foreign = [];
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  page.on('console', (m) => {
    // a refused request is logged by the browser itself ("Failed to load resource"): expected for the error case
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) pageErrors.push(m.text());
  });
  page.on('request', (r) => { if (!r.url().startsWith(base) && !r.url().startsWith('data:')) foreign.push(r.url()); });
  const close = async () => {
    await browser.close().catch(() => {});
    rmSync(profile, { recursive: true, force: true });
  };
  return { browser, page, pageErrors, foreign, close };
}
