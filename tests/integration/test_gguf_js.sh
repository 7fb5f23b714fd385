#!/bin/bash
# test_gguf_js.sh - an independent parser (@huggingface/gguf, Node) re-reads the GGUF files
# attnd writes (mkmodel and quantize) and the shared models, and must agree with `attnd info --json` on every key,
# value, tensor, type and offset (tests/js/check_gguf.mjs). Every file mkmodel or quantize writes must also
# load and score.
#   ATTND   attnd binary (default build/release/attnd)
#   SHARED  shared test data folder (default ../shared)
# Exit 0 pass, 1 fail, 77 skip (no Node.js >= 20).
set -euo pipefail

# shellcheck source=tests/integration/node_common.sh
. "$(dirname "$0")/node_common.sh"
nt_init test_gguf_js
nt_need_node "the independent GGUF parser (@huggingface/gguf)"
nt_npm tests/js @huggingface/gguf

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- models written by mkmodel -----------------------------------------------------------
shape=(--layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 128 --seed 11)
mk() {  # name, mkmodel flags...
  local name=$1; shift
  "$ATTND" mkmodel -o "$tmp/$name.gguf" "${shape[@]}" "$@" 2>"$tmp/$name.mk.log" || {
    echo "FAIL mkmodel $name: $(cat "$tmp/$name.mk.log")"
    return 1
  }
}
made=()
fail=0
for spec in \
  "llama-f32-untied --arch llama --vocab-size 300 --type f32" \
  "qwen2-q8_0-tied --arch qwen2 --vocab-size 300 --type q8_0 --tied" \
  "llama-q4_0 --arch llama --vocab-size 300 --type q4_0" \
  "llama-f16 --arch llama --vocab-size 300 --type f16" \
  "llama-bf16 --arch llama --vocab-size 300 --type bf16" \
  "llama-spm-vocab-q8_0 --arch llama --type q8_0 --vocab-from $SHARED/vocab/ggml-vocab-llama-spm.gguf"; do
  read -r -a args <<<"$spec"
  if mk "${args[@]}"; then made+=("$tmp/${args[0]}.gguf"); else fail=1; fi
done

# ---- files written by attnd quantize (they must also load and score, below) ---------------
for preset in q8_0 q4_0 q4_k_m q5_k_m q6_k; do
  qf="$tmp/quantized-$preset.gguf"
  if "$ATTND" quantize "$SHARED/models/formats/pub-llama-k-f32.gguf" "$qf" --type "$preset" --threads 2 \
    2>"$tmp/q-$preset.log"; then
    made+=("$qf")
  else
    echo "FAIL attnd quantize --type $preset: $(tail -n 3 "$tmp/q-$preset.log")"
    fail=1
  fi
done
# the command line (the CLI table): --help from the table; a bad preset, a missing OUT, a
# surplus argument and --threads out of range are refused with status 2 and write nothing
"$ATTND" quantize --help | grep -- '--type PRESET' >/dev/null || { echo "FAIL attnd quantize --help lacks --type"; fail=1; }
src="$SHARED/models/formats/pub-llama-k-f32.gguf"
for bad in "$src $tmp/bad.gguf --type q3_x" "$src --type q8_0" "$src $tmp/bad.gguf extra --type q8_0" \
  "$src $tmp/bad.gguf --type q8_0 --threads 0"; do
  read -r -a args <<<"$bad"
  rc=0
  "$ATTND" quantize "${args[@]}" 2>/dev/null || rc=$?
  if [ "$rc" != 2 ] || [ -e "$tmp/bad.gguf" ]; then echo "FAIL attnd quantize $bad: status $rc"; fail=1; fi
done

# ---- every file: both parsers agree ------------------------------------------------------
files=("${made[@]}")
shopt -s nullglob
shared_models=("$SHARED"/models/*.gguf "$SHARED"/models/formats/*.gguf)
shopt -u nullglob
if [ ${#shared_models[@]} -eq 0 ]; then
  echo "FAIL no models under $SHARED/models (set SHARED=...)"
  fail=1
fi
files+=("${shared_models[@]}")
checked=0
for f in "${files[@]}"; do
  json="$tmp/$(basename "$f").json"
  if ! "$ATTND" info --json "$f" >"$json"; then
    echo "FAIL attnd info --json $f"
    fail=1
    continue
  fi
  if node tests/js/check_gguf.mjs "$f" "$json"; then checked=$((checked + 1)); else fail=1; fi
done

# ---- every mkmodel file loads and scores ---------------------------------------------------
scored=0
for f in "${made[@]}"; do
  out="$tmp/$(basename "$f").score.json"
  if ! "$ATTND" score -m "$f" --tokens 1,2,3 --top-k 3 >"$out" 2>"$out.log"; then
    echo "FAIL attnd score $(basename "$f"): $(tail -n 3 "$out.log")"
    fail=1
    continue
  fi
  if node -e '
    const fs = require("fs");
    const r = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
    const bad = (m) => { console.error("score " + process.argv[2] + ": " + m); process.exit(1); };
    if (JSON.stringify(r.tokens) !== "[1,2,3]") bad("tokens " + JSON.stringify(r.tokens));
    if (!Array.isArray(r.positions) || r.positions.length !== 3) bad("expected 3 positions");
    for (const [i, p] of r.positions.entries()) {
      if (!Array.isArray(p.top) || p.top.length !== 3) bad(`position ${i}: expected top 3`);
      let prev = 0;
      for (const [id, lp] of p.top) {
        if (!Number.isInteger(id) || id < 0) bad(`position ${i}: bad id ${id}`);
        if (!Number.isFinite(lp) || lp > 1e-6 || lp > prev + 1e-6) bad(`position ${i}: bad logprob ${lp}`);
        prev = lp;
      }
    }' "$out" "$(basename "$f")"; then
    scored=$((scored + 1))
  else
    fail=1
  fi
done

echo "test_gguf_js: ${#made[@]} mkmodel files + ${#shared_models[@]} shared models;" \
  "$checked agree with @huggingface/gguf, $scored of ${#made[@]} scored"
exit $fail
