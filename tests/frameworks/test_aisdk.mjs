// test_aisdk.mjs - the Vercel AI SDK (ai + @ai-sdk/openai, pinned in package-lock.json) against a
// running attnd: generateText and streamText through the provider's default model (openai(id):
// the Responses API, POST /v1/responses) and its chat model (openai.chat(id): POST
// /v1/chat/completions), with a system prompt and with a message history. Every greedy answer is
// compared with /v1/generate on the prompt rendered by hand from the ChatML definition (text, and
// the tokens attnd kept for the response), finishReason and usage with what /v1/generate reports.
// It also runs the tool-calling (ATTND_TEST_TOOLS=0: not) and structured-output tests (tools,
// toolChoice, generateObject), for when attnd has tools and response_format json_schema.
// Usage: ATTND_BASE=... ATTND=... ATTND_MODEL=... node test_aisdk.mjs   (exit 0 pass, 1 fail)
import { createOpenAI } from "@ai-sdk/openai";
import { generateObject, generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";
import { base, check, finish, kept, modelId, recordingFetch, reference, section, tools } from "./common.mjs";

const model = await modelId();
const rec = recordingFetch();
const openai = createOpenAI({ baseURL: `${base}/v1`, apiKey: "unused", fetch: rec });
const sys = { role: "system", content: "Be brief." };
const user = { role: "user", content: "What is the capital of France?" };
const greedy = { temperature: 0, maxOutputTokens: 12, maxRetries: 0 };
// the two ways to the model: the provider's default (Responses API) and its chat model
const routes = [
  { name: "openai(id)", lm: () => openai(model), path: "/v1/responses" },
  { name: "openai.chat(id)", lm: () => openai.chat(model), path: "/v1/chat/completions" },
];

function checkUsage(u, ref, what) {
  check(u && u.inputTokens === ref.ids.length && u.outputTokens === ref.n && u.totalTokens === ref.ids.length + ref.n,
    `${what}: usage == /v1/generate's token counts`, [u, ref.ids.length, ref.n]);
}
// the tokens attnd kept for the response == the hand-rendered prompt + /v1/generate's tokens
// (chat ids only: /attention does not take a Responses API id, resp-H, yet)
async function checkKept(id, ref, what) {
  if (!/^chatcmpl-/.test(id)) {
    check(/^resp-[0-9a-f]{32}$/.test(id), `${what}: the response id is attnd's`, id);
    return;
  }
  const toks = await kept(id);
  check(JSON.stringify(toks) === JSON.stringify([...ref.ids, ...ref.tokens]),
    `${what}: attnd's tokens == rendered prompt + /v1/generate's`, [id, toks?.length, ref.ids.length + ref.n]);
}

async function generate(r, ref, prompt, what) {
  rec.reset();
  const res = await generateText({ model: r.lm(), ...prompt, ...greedy });
  check(rec.calls.length === 1 && rec.last().path === r.path, `${what}: calls ${r.path}`, rec.calls.map((c) => c.path));
  const sent = rec.last().body;
  check(sent.temperature === 0 && (sent.max_output_tokens ?? sent.max_tokens) === 12, `${what}: sends temperature, max tokens`, sent);
  check(res.text === ref.text, `${what}: text == /v1/generate`, [res.text, ref.text]);
  check(res.finishReason === "length", `${what}: finishReason length`, res.finishReason);
  checkUsage(res.usage, ref, what);
  check(res.steps.length === 1 && res.toolCalls.length === 0, `${what}: one step, no tool calls`);
  await checkKept(res.response.id, ref, what);
  return res;
}

async function stream(r, ref, prompt, what) {
  rec.reset();
  const errors = [];
  const res = streamText({ model: r.lm(), ...prompt, ...greedy, onError: ({ error }) => errors.push(error) });
  const parts = [];
  for await (const t of res.textStream) parts.push(t);
  check(errors.length === 0, `${what}: no stream error`, errors.map(String));
  check(rec.last().path === r.path && rec.last().body.stream === true, `${what}: streams from ${r.path}`, rec.last());
  check(parts.length > 2 && parts.join("") === ref.text, `${what}: text parts joined == whole`, [parts, ref.text]);
  check((await res.text) === ref.text, `${what}: result.text == whole`);
  check((await res.finishReason) === "length", `${what}: finishReason length`, await res.finishReason);
  checkUsage(await res.usage, ref, what);
  await checkKept((await res.response).id, ref, what);
}

async function routeTests(r) {
  const ref = await reference([sys, user], 12);
  const one = { system: sys.content, prompt: user.content };
  await generate(r, ref, one, `generateText ${r.name}`);
  await stream(r, ref, one, `streamText ${r.name}`);
  const msgs = [sys, user, { role: "assistant", content: "Paris." }, { role: "user", content: "And of Spain?" }];
  const href = await reference(msgs, 12);
  check(href.text !== ref.text, "the history changes the greedy answer (so the comparison can fail)");
  await generate(r, href, { system: sys.content, messages: msgs.slice(1) }, `generateText ${r.name}, history`);
  await stream(r, href, { system: sys.content, messages: msgs.slice(1) }, `streamText ${r.name}, history`);
  // content as text parts is the same message
  const asParts = msgs.slice(1).map((m) => (m.role === "user" ? { role: "user", content: [{ type: "text", text: m.content }] } : m));
  await generate(r, href, { system: sys.content, messages: asParts }, `generateText ${r.name}, text parts`);
}

// stop sequences (chat completions' stop; the Responses API has none)
async function stopTest() {
  const ref = await reference([sys, user], 12);
  const cut = [...ref.text].slice(4, 6).join("");
  const res = await generateText({ model: openai.chat(model), system: sys.content, prompt: user.content, ...greedy,
    stopSequences: ["@@never@@", cut] });
  check(res.text === ref.text.slice(0, ref.text.indexOf(cut)) && res.finishReason === "stop",
    "stopSequences end the text before the stop string", [res.text, ref.text, cut, res.finishReason]);
}

// a bad request surfaces as the SDK's APICallError with attnd's message
async function badRequest() {
  try {
    await generateText({ model: openai.chat(model), prompt: "hi", ...greedy, providerOptions: { openai: { logitBias: { 42: 5 } } } });
    check(false, "logit_bias: expected an error");
  } catch (e) {
    const err = e.lastError ?? e;
    check(err.statusCode === 400 && /logit_bias/.test(err.message), "logit_bias: a 400 naming the field", [err.statusCode, err.message]);
  }
}

// ---- tools and structured output (skipped with ATTND_TEST_TOOLS=0) -----------------------------
const weatherSchema = z.object({
  city: z.string().max(24).describe("the city to look up"),
  unit: z.enum(["celsius", "fahrenheit"]).describe("the temperature unit"),
});
function weatherTool(seen) {
  return tool({
    description: "The current weather in a city",
    inputSchema: weatherSchema,
    execute: async ({ city, unit }) => {
      seen.push({ city, unit });
      return `It is 21 degrees ${unit} in ${city}.`;
    },
  });
}

// two steps: the model must call get_weather (toolChoice), the SDK validates and runs it, the
// result goes back (a tool message / function_call_output) and the model answers in text
async function testToolsRoundTrip(r, toolChoice, what) {
  const seen = [];
  rec.reset();
  const res = await generateText({ model: r.lm(), system: "Use the tools.", prompt: "What is the weather in Paris?",
    temperature: 0, maxOutputTokens: 64, maxRetries: 0, tools: { get_weather: weatherTool(seen) }, toolChoice,
    stopWhen: stepCountIs(2), prepareStep: ({ stepNumber }) => (stepNumber === 1 ? { toolChoice: "none" } : {}) });
  check(rec.calls.length === 2 && rec.calls.every((c) => c.path === r.path), `${what}: two calls to ${r.path}`,
    rec.calls.map((c) => c.path));
  const first = rec.calls[0]?.body ?? {};
  check(first.tools?.length === 1 && (first.tools[0].function?.name ?? first.tools[0].name) === "get_weather",
    `${what}: the tool goes out`, first.tools);
  const choice = toolChoice === "required" ? "required"
    : first.messages ? { type: "function", function: { name: "get_weather" } } : { type: "function", name: "get_weather" };
  check(JSON.stringify(first.tool_choice) === JSON.stringify(choice), `${what}: tool_choice goes out`, first.tool_choice);
  const step0 = res.steps[0];
  check(step0 && step0.finishReason === "tool-calls" && step0.toolCalls.length >= 1 &&
    step0.toolCalls.every((c) => c.toolName === "get_weather" && c.toolCallId), `${what}: step 1 calls get_weather`,
    step0 && [step0.finishReason, step0.toolCalls, step0.content]);
  const call = step0?.toolCalls[0];
  if (!call) return;
  const parsed = weatherSchema.safeParse(call.input);
  check(parsed.success && seen.length >= 1, `${what}: the call's input fits the tool's JSON schema and ran`,
    [call.input, parsed.error?.issues]);
  const second = rec.calls[1]?.body ?? {};
  if (second.messages) {
    const tm = second.messages.find((m) => m.role === "tool");
    check(tm && tm.tool_call_id === call.toolCallId && /21 degrees/.test(tm.content), `${what}: the result goes back as a tool message`, tm);
  } else {
    const out = (second.input ?? []).find((m) => m.type === "function_call_output");
    check(out && out.call_id === call.toolCallId && /21 degrees/.test(JSON.stringify(out.output)),
      `${what}: the result goes back as function_call_output`, out);
  }
  check(res.steps.length === 2 && res.text.length > 0 && res.steps[1].toolCalls.length === 0, `${what}: a final text answer`,
    [res.steps.length, res.text]);
}

const personSchema = z.object({
  name: z.string().max(20),
  age: z.number().int().min(0).max(150),
  languages: z.array(z.enum(["en", "fr", "de"])).max(3),
});
async function testGenerateObject(r, what) {
  rec.reset();
  const res = await generateObject({ model: r.lm(), schema: personSchema, schemaName: "person", system: "Answer in JSON.",
    prompt: "Describe a person.", temperature: 0, maxOutputTokens: 96, maxRetries: 0 });
  const sent = rec.last().body;
  check((sent.response_format ?? sent.text?.format)?.type === "json_schema", `${what}: asks for json_schema`, sent);
  const parsed = personSchema.safeParse(res.object);
  check(parsed.success && res.finishReason === "stop", `${what}: the object fits the zod schema`, [res.object, res.finishReason]);
}

async function toolTests() {
  for (const r of routes) {
    await section(`tools ${r.name} required`, () => testToolsRoundTrip(r, "required", `tools (${r.name}, required)`));
    await section(`tools ${r.name} named`, () =>
      testToolsRoundTrip(r, { type: "tool", toolName: "get_weather" }, `tools (${r.name}, named tool)`));
    await section(`generateObject ${r.name}`, () => testGenerateObject(r, `generateObject (${r.name})`));
  }
}

for (const r of routes) await section(r.name, () => routeTests(r));
await section("stop", stopTest);
await section("bad request", badRequest);
if (tools) await toolTests();
finish("test_aisdk" + (tools ? " (with tools)" : ""));
