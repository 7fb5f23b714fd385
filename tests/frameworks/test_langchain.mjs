// test_langchain.mjs - LangChain JS (@langchain/openai's ChatOpenAI, pinned in package-lock.json)
// against a running attnd: invoke and stream on /v1/chat/completions (a system message, a
// multi-turn history, stop strings) and on /v1/responses (useResponsesApi). Every greedy answer is
// compared with /v1/generate on the prompt rendered by hand from the ChatML definition, and the
// usage LangChain reports with the token counts attnd's native route gives.
// It also runs the tool-calling (ATTND_TEST_TOOLS=0: not) and structured-output tests (bindTools,
// withStructuredOutput), for when attnd has tools and response_format json_schema.
// Usage: ATTND_BASE=... ATTND=... ATTND_MODEL=... node test_langchain.mjs   (exit 0 pass, 1 fail)
import { ChatOpenAI } from "@langchain/openai";
import { AIMessage, HumanMessage, SystemMessage } from "@langchain/core/messages";
import { tool } from "@langchain/core/tools";
import { z } from "zod";
import { base, check, finish, kept, modelId, recordingFetch, reference, section, tools } from "./common.mjs";

const model = await modelId();
const rec = recordingFetch();
// a ChatOpenAI on attnd; extra: more constructor fields
function chat(extra = {}) {
  return new ChatOpenAI({ configuration: { baseURL: `${base}/v1`, fetch: rec }, apiKey: "unused", model,
    temperature: 0, maxTokens: 12, maxRetries: 0, ...extra });
}
const sys = { role: "system", content: "Be brief." };
const user = { role: "user", content: "What is the capital of France?" };
const lcMessages = [new SystemMessage(sys.content), new HumanMessage(user.content)];

// usage_metadata == the reference's counts
function checkUsage(u, ref, what) {
  check(u && u.input_tokens === ref.ids.length && u.output_tokens === ref.n && u.total_tokens === ref.ids.length + ref.n,
    `${what}: usage_metadata == /v1/generate's token counts`, [u, ref.ids.length, ref.n]);
}

// the tokens attnd kept for the chat == the hand-rendered prompt + /v1/generate's tokens
async function checkKept(id, ref, what) {
  const toks = await kept(id);
  check(JSON.stringify(toks) === JSON.stringify([...ref.ids, ...ref.tokens]),
    `${what}: attnd's tokens == rendered prompt + /v1/generate's`, [id, toks?.length, ref.ids.length + ref.n]);
}

// ---- chat completions: invoke, stream, history, stop ------------------------------------------
async function chatCompletions(ref) {
  const llm = chat();
  rec.reset();
  const ai = await llm.invoke(lcMessages);
  check(rec.calls.length === 1 && rec.last().path === "/v1/chat/completions", "invoke calls /v1/chat/completions",
    rec.calls.map((c) => c.path));
  check(rec.last().body && rec.last().body.max_tokens === 12 && rec.last().body.temperature === 0,
    "invoke sends max_tokens and temperature", rec.last().body);
  check(ai instanceof AIMessage && ai.content === ref.text, "invoke: content == /v1/generate", [ai.content, ref.text]);
  check(ai.response_metadata.finish_reason === "length", "invoke: finish_reason length", ai.response_metadata);
  checkUsage(ai.usage_metadata, ref, "invoke");
  check(/^chatcmpl-[0-9a-f]{32}$/.test(ai.id ?? ""), "invoke: the message id is attnd's chat id", ai.id);
  await checkKept(ai.id, ref, "invoke");

  rec.reset();
  const parts = [];
  let whole = null;
  for await (const chunk of await llm.stream(lcMessages)) {
    parts.push(chunk.content);
    whole = whole ? whole.concat(chunk) : chunk;
  }
  check(rec.last().body.stream === true && rec.last().body.stream_options?.include_usage === true,
    "stream asks for the usage chunk", rec.last().body);
  check(parts.length > 2 && parts.join("") === ref.text, "stream: chunks joined == whole", [parts, ref.text]);
  check(whole.content === ai.content, "stream: concatenated message == invoke's");
  check(whole.response_metadata.finish_reason === "length", "stream: finish_reason length", whole.response_metadata);
  checkUsage(whole.usage_metadata, ref, "stream");
  await checkKept(whole.id, ref, "stream");
}

async function history() {
  const msgs = [sys, user, { role: "assistant", content: "Paris." }, { role: "user", content: "And of Spain?" }];
  const ref = await reference(msgs, 12);
  const ai = await chat().invoke([new SystemMessage(msgs[0].content), new HumanMessage(msgs[1].content),
    new AIMessage(msgs[2].content), new HumanMessage(msgs[3].content)]);
  check(ai.content === ref.text, "multi-turn history: content == /v1/generate", [ai.content, ref.text]);
  checkUsage(ai.usage_metadata, ref, "multi-turn history");
  await checkKept(ai.id, ref, "multi-turn history");
  // OpenAI-style dicts are the same messages to LangChain
  const asDicts = await chat().invoke(msgs);
  check(asDicts.content === ref.text, "messages as role/content dicts == message classes", asDicts.content);
}

async function stop(ref) {
  const cut = [...ref.text].slice(4, 6).join("");
  const at = ref.text.indexOf(cut);
  rec.reset();
  const ai = await chat().invoke(lcMessages, { stop: ["@@never@@", cut] });
  check(eq(rec.last().body.stop, ["@@never@@", cut]), "stop goes out as the stop field", rec.last().body.stop);
  check(ai.content === ref.text.slice(0, at) && ai.response_metadata.finish_reason === "stop",
    "stop string ends the content before it", [ai.content, ref.text, cut, ai.response_metadata.finish_reason]);
}

// ---- the Responses API --------------------------------------------------------------------------
async function responses(ref) {
  const llm = chat({ useResponsesApi: true });
  rec.reset();
  const ai = await llm.invoke(lcMessages);
  check(rec.calls.length === 1 && rec.last().path === "/v1/responses", "useResponsesApi: invoke calls /v1/responses",
    rec.calls.map((c) => c.path));
  check(rec.last().body.max_output_tokens === 12 && Array.isArray(rec.last().body.input), "sends max_output_tokens and input",
    rec.last().body);
  check(ai.text === ref.text, "responses invoke: text == /v1/generate", [ai.text, ref.text]);
  check(Array.isArray(ai.content) && ai.content.length === 1 && ai.content[0].type === "text",
    "responses invoke: one text block", ai.content);
  check(ai.response_metadata.status === "incomplete" && ai.response_metadata.incomplete_details?.reason === "max_output_tokens",
    "responses invoke: incomplete at max_output_tokens", ai.response_metadata);
  check(/^resp-/.test(ai.id ?? ""), "responses invoke: the message id is the response id", ai.id);
  checkUsage(ai.usage_metadata, ref, "responses invoke");

  rec.reset();
  const parts = [];
  let whole = null;
  for await (const chunk of await llm.stream(lcMessages)) {
    parts.push(chunk.text);
    whole = whole ? whole.concat(chunk) : chunk;
  }
  check(rec.last().path === "/v1/responses" && rec.last().body.stream === true, "responses stream calls /v1/responses",
    rec.last());
  check(parts.filter((p) => p).length > 2 && parts.join("") === ref.text, "responses stream: chunks joined == whole",
    [parts, ref.text]);
  check(whole.text === ai.text, "responses stream: concatenated message == invoke's", whole.text);
  check(whole.response_metadata.status === "incomplete", "responses stream: status incomplete", whole.response_metadata.status);
  checkUsage(whole.usage_metadata, ref, "responses stream");
}

// ---- tools and structured output (skipped with ATTND_TEST_TOOLS=0) ----------------------------
const weatherSchema = z.object({
  city: z.string().max(24).describe("the city to look up"),
  unit: z.enum(["celsius", "fahrenheit"]).describe("the temperature unit"),
});
const getWeather = tool(async ({ city, unit }) => `It is 21 degrees ${unit} in ${city}.`,
  { name: "get_weather", description: "The current weather in a city", schema: weatherSchema });

// one round trip: the model must call get_weather (toolChoice), its arguments must fit the schema,
// the tool's result goes back as a tool message and the model answers in text
async function testToolsRoundTrip(extra, toolChoice, what) {
  const llm = chat({ maxTokens: 200, ...extra });
  const question = [new SystemMessage("Use the tools."), new HumanMessage("What is the weather in Paris?")];
  rec.reset();
  const ai = await llm.bindTools([getWeather], { tool_choice: toolChoice }).invoke(question);
  const sent = rec.last().body;
  check(sent.tools?.length === 1 && (sent.tools[0].function?.name ?? sent.tools[0].name) === "get_weather",
    `${what}: the tool goes out`, sent.tools);
  const choice = toolChoice === "required" ? "required"
    : sent.messages ? { type: "function", function: { name: toolChoice } } : { type: "function", name: toolChoice };
  check(eq(sent.tool_choice, choice), `${what}: tool_choice goes out`, sent.tool_choice);
  check(ai.tool_calls.length >= 1 && ai.tool_calls.every((c) => c.name === "get_weather" && typeof c.id === "string" && c.id),
    `${what}: a get_weather call with an id`, [ai.tool_calls, ai.invalid_tool_calls]);
  check(ai.invalid_tool_calls.length === 0, `${what}: no invalid tool calls`, ai.invalid_tool_calls);
  const call = ai.tool_calls[0];
  if (!call) return;
  const parsed = weatherSchema.safeParse(call.args);
  check(parsed.success, `${what}: the call's arguments fit the tool's JSON schema`, [call.args, parsed.error?.issues]);
  const result = await getWeather.invoke(call); // a ToolMessage answering call.id
  check(result.tool_call_id === call.id, `${what}: the tool message answers the call`, result);
  rec.reset();
  // the answer: chat completions keep the tool with tool_choice "none"; LangChain's Responses API
  // path drops a string tool_choice like "none", so there the tool is not sent again
  const answerer = extra.useResponsesApi ? llm : llm.bindTools([getWeather], { tool_choice: "none" });
  const final = await answerer.invoke([...question, ai, result]);
  const body = rec.last().body;
  if (body.messages) {
    const tm = body.messages.find((m) => m.role === "tool");
    const am = body.messages.find((m) => m.role === "assistant");
    check(tm && tm.tool_call_id === call.id && tm.content === result.content, `${what}: the result goes back as a tool message`, tm);
    check(am && am.tool_calls?.[0]?.id === call.id && am.tool_calls[0].function.name === "get_weather",
      `${what}: the assistant turn carries its tool call`, am);
  } else {
    const out = body.input.find((m) => m.type === "function_call_output");
    check(out && out.call_id === call.id && out.output === result.content, `${what}: the result goes back as function_call_output`, out);
  }
  check(typeof final.text === "string" && final.text.length > 0 && final.tool_calls.length === 0,
    `${what}: a final text answer`, [final.text, final.tool_calls]);
}

const personSchema = z.object({
  name: z.string().max(20),
  age: z.number().int().min(0).max(150),
  languages: z.array(z.enum(["en", "fr", "de"])).max(3),
});
async function testStructuredOutput(extra, method, what) {
  const llm = chat({ maxTokens: 96, ...extra });
  rec.reset();
  const out = await llm.withStructuredOutput(personSchema, { name: "person", method, strict: true }).invoke([
    new SystemMessage("Answer in JSON."), new HumanMessage("Describe a person.")]);
  const sent = rec.last().body;
  if (method === "jsonSchema")
    check((sent.response_format ?? sent.text?.format)?.type === "json_schema", `${what}: asks for json_schema`, sent);
  const parsed = personSchema.safeParse(out);
  check(parsed.success, `${what}: the answer fits the zod schema`, [out, parsed.error?.issues]);
}

async function toolTests() {
  await section("tools, chat, required", () => testToolsRoundTrip({}, "required", "bindTools (chat, required)"));
  await section("tools, chat, named", () => testToolsRoundTrip({}, "get_weather", "bindTools (chat, named tool)"));
  await section("tools, responses", () => testToolsRoundTrip({ useResponsesApi: true }, "get_weather", "bindTools (responses)"));
  await section("structured, chat", () => testStructuredOutput({}, "jsonSchema", "withStructuredOutput (chat, json_schema)"));
  await section("structured, chat, tools", () =>
    testStructuredOutput({}, "functionCalling", "withStructuredOutput (chat, function calling)"));
  await section("structured, responses", () =>
    testStructuredOutput({ useResponsesApi: true }, "jsonSchema", "withStructuredOutput (responses, json_schema)"));
}

function eq(a, b) { return JSON.stringify(a) === JSON.stringify(b); }

const ref = await reference([sys, user], 12);
// the system message changes the greedy answer, so a dropped one fails the comparisons
check((await reference([user], 12)).text !== ref.text, "reference: the system message matters");
await section("chat completions", () => chatCompletions(ref));
await section("history", history);
await section("stop", () => stop(ref));
await section("responses", () => responses(ref));
if (tools) await toolTests();
finish("test_langchain" + (tools ? " (with tools)" : ""));
