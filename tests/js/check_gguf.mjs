// check_gguf.mjs - reads a GGUF file with an independent parser (@huggingface/gguf) and checks
// that it agrees with attnd's reader, as dumped by `attnd info --json FILE`.
//
//   node check_gguf.mjs FILE.gguf INFO.json
//
// Compared: version, alignment, data offset; every metadata key, its type, its value (strings
// and integers exactly, floats within 1e-6 relative), array element types and lengths; the
// tensor table in order: names, dims, types, absolute offsets (tensorDataOffset + offset); and
// the byte sizes attnd computes against the bits-per-weight of each type.
// Prints one summary line; exits 1 on any mismatch, 2 on a usage or parse error.
import { readFileSync, statSync } from "node:fs";
import { basename } from "node:path";
import { gguf, GGMLQuantizationType } from "@huggingface/gguf";

const [, , ggufPath, infoPath] = process.argv;
if (!ggufPath || !infoPath) {
  console.error("usage: node check_gguf.mjs FILE.gguf INFO.json   (INFO.json from `attnd info --json FILE.gguf`)");
  process.exit(2);
}

// attnd writes integers as exact decimal literals; JSON.parse would round those above 2^53,
// so turn long integer literals (outside strings) into strings first.
function parseExactJson(text) {
  const quoted = text.replace(/"(?:[^"\\]|\\.)*"|(?<![\d.eE+-])-?\d{16,}(?![\d.eE])/g, (m) =>
    m.startsWith('"') ? m : `"${m}"`,
  );
  return JSON.parse(quoted);
}

// gguf_vtype_name() order, which is also the GGUF value type numbering
const VTYPES = ["u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"];
const INT_TYPES = new Set(["u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64"]);
// bits per weight of the types mkmodel and the shared models use (ggml's block layouts)
const BPW = {
  f32: 32, f16: 16, bf16: 16, q8_0: (34 * 8) / 32, q4_0: (18 * 8) / 32, q4_1: (20 * 8) / 32,
  q5_0: (22 * 8) / 32, q5_1: (24 * 8) / 32, iq4_nl: (18 * 8) / 32, q2_k: (84 * 8) / 256, q3_k: (110 * 8) / 256,
  q4_k: (144 * 8) / 256, q5_k: (176 * 8) / 256, q6_k: (210 * 8) / 256, iq4_xs: (136 * 8) / 256,
};
// keys the JS parser adds from the file header
const HEADER_KEYS = new Set(["version", "tensor_count", "kv_count"]);

const errors = [];
function fail(msg) {
  errors.push(msg);
}
function big(x) {
  return typeof x === "bigint" ? x : BigInt(x);
}

let info;
try {
  info = parseExactJson(readFileSync(infoPath, "utf8"));
} catch (e) {
  console.error(`check_gguf: cannot read ${infoPath}: ${e.message}`);
  process.exit(2);
}
let r;
try {
  r = await gguf(ggufPath, { allowLocalFile: true, computeParametersCount: true, typedMetadata: true });
} catch (e) {
  console.error(`check_gguf: @huggingface/gguf cannot parse ${ggufPath}: ${e.message}`);
  process.exit(1);
}
const md = r.metadata;
const typed = r.typedMetadata;
const fileSize = BigInt(statSync(ggufPath).size);

// ---- header ----
if (md.version !== Number(info.version)) fail(`version: js ${md.version}, attnd ${info.version}`);
if (big(info.file_size) !== fileSize) fail(`file size: attnd ${info.file_size}, stat ${fileSize}`);
const jsAlign = md["general.alignment"] ?? 32;
if (Number(jsAlign) !== Number(info.alignment)) fail(`alignment: js ${jsAlign}, attnd ${info.alignment}`);
if (r.tensorDataOffset !== big(info.data_offset))
  fail(`data offset: js ${r.tensorDataOffset}, attnd ${info.data_offset}`);

// ---- metadata ----
const cKeys = Object.keys(info.kv);
const jsKeys = Object.keys(md).filter((k) => !HEADER_KEYS.has(k));
if (big(md.kv_count) !== BigInt(cKeys.length)) fail(`kv count: js ${md.kv_count}, attnd ${cKeys.length}`);
for (const k of jsKeys) if (!(k in info.kv)) fail(`key '${k}': only the JS parser has it`);
let nArrays = 0;
for (const k of cKeys) {
  if (!(k in md)) {
    fail(`key '${k}': only attnd has it`);
    continue;
  }
  const ctype = info.kv_types[k];
  const jtype = VTYPES[typed[k]?.type];
  if (ctype !== jtype) {
    fail(`key '${k}': type js ${jtype}, attnd ${ctype}`);
    continue;
  }
  const cv = info.kv[k];
  const jv = md[k];
  if (ctype === "array") {
    nArrays++;
    const jsub = VTYPES[typed[k].subType];
    if (jsub !== cv.type) fail(`key '${k}': array element type js ${jsub}, attnd ${cv.type}`);
    if (!Array.isArray(jv) || BigInt(jv.length) !== big(cv.n))
      fail(`key '${k}': array length js ${jv?.length}, attnd ${cv.n}`);
  } else if (ctype === "string") {
    if (jv !== cv) fail(`key '${k}': string js ${JSON.stringify(jv)}, attnd ${JSON.stringify(cv)}`);
  } else if (ctype === "bool") {
    if (jv !== cv) fail(`key '${k}': bool js ${jv}, attnd ${cv}`);
  } else if (INT_TYPES.has(ctype)) {
    if (big(jv) !== big(cv)) fail(`key '${k}': ${ctype} js ${jv}, attnd ${cv}`);
  } else {
    // f32 / f64; attnd writes null for NaN and infinities
    const a = Number(jv);
    const b = cv === null ? NaN : Number(cv);
    const same = Number.isFinite(a)
      ? Math.abs(a - b) <= 1e-6 * Math.max(Math.abs(a), Math.abs(b))
      : !Number.isFinite(b);
    if (!same) fail(`key '${k}': ${ctype} js ${a}, attnd ${b}`);
  }
}

// ---- tensors ----
const ct = info.tensors;
const jt = r.tensorInfos;
if (big(md.tensor_count) !== BigInt(ct.length)) fail(`tensor count: js ${md.tensor_count}, attnd ${ct.length}`);
if (jt.length !== ct.length) fail(`tensor table length: js ${jt.length}, attnd ${ct.length}`);
let elems = 0n;
for (let i = 0; i < Math.min(jt.length, ct.length); i++) {
  const j = jt[i];
  const c = ct[i];
  const where = `tensor ${i} '${c.name}'`;
  if (j.name !== c.name) fail(`${where}: name js '${j.name}'`);
  if (j.n_dims !== c.ne.length) fail(`${where}: n_dims js ${j.n_dims}, attnd ${c.ne.length}`);
  let n = 1n;
  for (let d = 0; d < c.ne.length; d++) {
    if (j.shape[d] !== big(c.ne[d])) fail(`${where}: ne[${d}] js ${j.shape[d]}, attnd ${c.ne[d]}`);
    n *= big(c.ne[d]);
  }
  elems += n;
  if (j.dtype !== Number(c.type_id)) fail(`${where}: type id js ${j.dtype}, attnd ${c.type_id}`);
  const jname = String(GGMLQuantizationType[j.dtype] ?? "?").toLowerCase();
  if (jname !== c.type) fail(`${where}: type name js ${jname}, attnd ${c.type}`);
  const abs = r.tensorDataOffset + j.offset;
  if (abs !== big(c.offset)) fail(`${where}: absolute offset js ${abs}, attnd ${c.offset}`);
  if (big(c.offset) % big(info.alignment) !== 0n) fail(`${where}: offset ${c.offset} not aligned`);
  if (big(c.offset) + big(c.nbytes) > fileSize) fail(`${where}: data ends past the end of the file`);
  if (c.type in BPW && Number(c.nbytes) * 8 !== Number(n) * BPW[c.type])
    fail(`${where}: nbytes ${c.nbytes} is not ${n} x ${BPW[c.type]} bits`);
}
if (r.parameterCount !== Number(elems)) fail(`parameter count: js ${r.parameterCount}, attnd ${elems}`);

const name = basename(ggufPath);
if (errors.length) {
  for (const e of errors.slice(0, 30)) console.error(`check_gguf: ${name}: ${e}`);
  if (errors.length > 30) console.error(`check_gguf: ${name}: ... and ${errors.length - 30} more`);
  console.log(`check_gguf: ${name}: FAIL (${errors.length} mismatches)`);
  process.exit(1);
}
console.log(
  `check_gguf: ${name}: OK (v${md.version}, ${cKeys.length} keys incl. ${nArrays} arrays, ${ct.length} tensors, ` +
    `${elems} parameters, data at ${info.data_offset})`,
);
