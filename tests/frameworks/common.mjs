// common.mjs - what test_langchain.mjs and test_aisdk.mjs share: the check counter, attnd's native
// /v1/generate (the reference every framework answer is compared with), `attnd tokenize`, the
// hand-rendered ChatML prompts, and a fetch that records which routes a framework called.
// Environment (set by tests/integration/test_frameworks.sh): ATTND_BASE (the daemon's URL),
// ATTND (the binary), ATTND_MODEL (the .gguf it serves).
import { execFileSync } from "node:child_process";

export const base = process.env.ATTND_BASE;
export const attnd = process.env.ATTND;
export const modelPath = process.env.ATTND_MODEL;
if (!base || !attnd || !modelPath) {
  console.error("usage: ATTND_BASE=http://127.0.0.1:PORT ATTND=attnd ATTND_MODEL=model.gguf node test_x.mjs");
  process.exit(1);
}
export const tools = process.env.ATTND_TEST_TOOLS !== "0"; // the tool and structured-output tests (0: skip them)

let failures = 0, checks = 0;
export function check(cond, what, extra) {
  checks++;
  if (!cond) {
    failures++;
    console.error(`FAIL: ${what}` + (extra !== undefined ? `: ${JSON.stringify(extra)}` : ""));
  }
}
export function fail(e) {
  failures++;
  console.error("FAIL: " + (e && e.stack ? e.stack : e));
}
// runs an async test, counting a throw as one failure so the next test still runs
export async function section(name, fn) {
  try {
    await fn();
  } catch (e) {
    fail(`${name}: ${e && e.stack ? e.stack : e}`);
  }
}
export function finish(name) {
  console.error(`${name}: ${checks} checks, ${failures} failed`);
  process.exit(failures ? 1 : 0);
}

export async function native(path, body) {
  const r = await fetch(base + path, body ? { method: "POST", body: JSON.stringify(body) } : undefined);
  const j = await r.json();
  if (r.status !== 200) throw new Error(`${path}: ${r.status} ${JSON.stringify(j)}`);
  return j;
}
// the tokens attnd kept for a response (prompt then generated), from /attention
export async function kept(id, index = 0) {
  const a = await native(`/attention?layer=0&head=0&id=${encodeURIComponent(id)}&index=${index}`);
  return a.token_ids;
}
export function tokenize(text) {
  const out = execFileSync(attnd, ["tokenize", "-m", modelPath, "--special"], { input: text });
  return JSON.parse(out).tokens;
}
// the served model's id, from /v1/models
export async function modelId() {
  const m = await native("/v1/models");
  return m.data[0].id;
}

// [{role, content}] rendered by hand from the ChatML definition (the tiny model has no template of
// its own; attnd falls back to ChatML), with the assistant turn opened
export function chatml(msgs) {
  return msgs.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join("") + "<|im_start|>assistant\n";
}
// the greedy reference: /v1/generate on the hand-rendered prompt. { ids, text, tokens, n }
export async function reference(msgs, maxTokens) {
  const ids = tokenize(chatml(msgs));
  const g = await native("/v1/generate", { prompt: ids, max_tokens: maxTokens, temperature: 0 });
  return { ids, text: g.text, tokens: g.tokens, n: g.tokens.length };
}

// a fetch that records each request's method, path and JSON body before sending it
export function recordingFetch() {
  const calls = [];
  const f = async (url, init) => {
    const u = new URL(typeof url === "string" || url instanceof URL ? url : url.url);
    let body = null;
    try {
      body = init && typeof init.body === "string" ? JSON.parse(init.body) : null;
    } catch {
      body = null;
    }
    calls.push({ method: (init && init.method) || "GET", path: u.pathname, body });
    return fetch(url, init);
  };
  f.calls = calls;
  f.last = () => calls[calls.length - 1];
  f.reset = () => calls.splice(0);
  return f;
}
