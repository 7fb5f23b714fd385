#!/bin/bash
# make bench: generates the benchmark models once (Qwen2.5-0.5B shape, random weights) and
# prints tables. Tokens/s are medians over several runs; 2 threads, like the reference numbers.
set -euo pipefail
BUILD=${1:-build/release}
ATTND=${ATTND:-$BUILD/attnd}
MODELS=build/models
THREADS=${THREADS:-2}
REPS=${REPS:-5}
mkdir -p "$MODELS"
shape="--arch qwen2 --layers 24 --dim 896 --heads 14 --kv-heads 2 --ffn 4864 --vocab-size 151936 --tied"
# TYPES: the model rows to print (q4_k_m is made by attnd quantize from the f16 model, as a user
# would make one); MODELS_ONLY=1 skips the other benchmarks (a quick check of the model rows)
TYPES=${TYPES:-q8_0 q4_0 f16 q4_k_m}
has() { case " $TYPES " in *" $1 "*) return 0;; esac; return 1; }
for t in q8_0 q4_0 f16; do # q8_0 also feeds bench_sched, f16 also feeds the quantizer
  has "$t" || { [ "$t" = q8_0 ] && [ "${MODELS_ONLY:-0}" != 1 ]; } || { [ "$t" = f16 ] && has q4_k_m; } || continue
  f=$MODELS/qwen2.5-0.5b-shape-$t.gguf
  [ -f "$f" ] || "$ATTND" mkmodel -o "$f" $shape --type "$t" --seed 7
done
q4=$MODELS/qwen2.5-0.5b-shape-q4_k_m.gguf
if has q4_k_m && [ ! -f "$q4" ]; then # written under another name first: an interrupted run leaves no half file
  "$ATTND" quantize "$MODELS/qwen2.5-0.5b-shape-f16.gguf" "$q4.tmp" --type q4_k_m --threads "$THREADS" 2>"$q4.log" \
    || { tail -n 3 "$q4.log" >&2; exit 1; }
  mv "$q4.tmp" "$q4"
fi
# one bench_model run: "test tokens/s" lines
# ("read": generation's ceiling, the weight bytes of a token only read; see bench_model.c)
attnd_once() { "$BUILD/bench/bench_model" "$1" "$THREADS" 1 x | awk -F'|' '$3 ~ /pp|tg|read/ {gsub(/ /, "", $3); print $3, $4 + 0}'; }
# one llama-bench run over the same tests: "test tokens/s" lines
ref_once() {
  "$REF_BIN/llama-bench" -m "$1" -t "$THREADS" -p 128,512 -n 64 -r 1 -o md 2>/dev/null |
    awk -F'|' 'NF > 3 && $(NF-2) ~ /pp|tg/ {t = $(NF-2); gsub(/ /, "", t); split($(NF-1), v, " "); print t, v[1] + 0}'
}
median_of() { sort -n | awk '{v[NR] = $1} END {if (NR) printf "%.1f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo
if [ -n "${REF_BIN:-}" ]; then
  [ -x "$REF_BIN/llama-bench" ] || { echo "run.sh: REF_BIN=$REF_BIN holds no llama-bench" >&2; exit 1; }
  # attnd and the reference alternate run by run on the same file, so a minute of a busy
  # machine slows both; medians of $REPS runs each
  echo "## Model speed beside the reference engine ($THREADS threads, tokens/s, median of $REPS interleaved runs each)"
  echo
  flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -x -E 'avx2|avx512f|avx512_vnni|avx512_bf16|amx_int8|amx_bf16' | tr '\n' ' ')
  echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') ($flags); reference: $REF_BIN; $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "| model                     | test     |     attnd | reference |  ratio |"
  echo "|---------------------------|----------|-----------|-----------|--------|"
  tmp=$(mktemp -d)
  for t in $TYPES; do
    f=$MODELS/qwen2.5-0.5b-shape-$t.gguf
    for r in $(seq "$REPS"); do
      attnd_once "$f" >>"$tmp/a.$t"
      ref_once "$f" >>"$tmp/r.$t"
    done
    for test in pp128 pp512 tg64; do
      a=$(awk -v t=$test '$1 == t {print $2}' "$tmp/a.$t" | median_of)
      b=$(awk -v t=$test '$1 == t {print $2}' "$tmp/r.$t" | median_of)
      printf "| %-25s | %-8s | %9s | %9s | %5sx |\n" "qwen2.5-0.5b-shape $t" "$test" "$a" "$b" \
        "$(awk -v a="$a" -v b="$b" 'BEGIN {if (b > 0) printf "%.2f", a / b; else printf "-"}')"
    done
  done
  echo
  echo "Generation against its ceiling: 'read' reads the weight bytes one token multiplies, in the engine's"
  echo "jobs and thread split, and does nothing with them; no engine that reads each weight once per token"
  echo "can generate faster. The last column is the most any engine could be ahead of the reference here."
  echo
  echo "| model                     | read tokens/s | attnd tg64   | reference tg64 | ceiling / reference |"
  echo "|---------------------------|---------------|--------------|----------------|---------------------|"
  for t in $TYPES; do
    c=$(awk '$1 == "read" {print $2}' "$tmp/a.$t" | median_of)
    a=$(awk '$1 == "tg64" {print $2}' "$tmp/a.$t" | median_of)
    b=$(awk '$1 == "tg64" {print $2}' "$tmp/r.$t" | median_of)
    awk -v t="$t" -v c="$c" -v a="$a" -v b="$b" 'BEGIN {
      printf "| %-25s | %13s | %5s (%3.0f%%) | %7s (%3.0f%%) | %18.2fx |\n", "qwen2.5-0.5b-shape " t, c, a, 100 * a / c, b, 100 * b / c, c / b }'
  done
  rm -rf "$tmp"
else
  echo "## Model speed (CPU, $THREADS threads, tokens/s: median, min, max of $REPS runs)"
  echo
  echo "| model                  | test     |    median |       min |       max |"
  echo "|------------------------|----------|-----------|-----------|-----------|"
  for t in $TYPES; do
    # drop nothing from the page cache: load MB/s is from memory, as on a warm server
    "$BUILD/bench/bench_model" "$MODELS/qwen2.5-0.5b-shape-$t.gguf" "$THREADS" "$REPS" "qwen2.5-0.5b-shape $t"
  done
  echo
  echo "No reference engine in this run: REF_BIN=/path/to/llama.cpp/build/bin (holding llama-bench and llama-server)"
  echo "prints it beside attnd, interleaved, with the ratio. Ratios only hold within one run on one machine."
fi
[ "${MODELS_ONLY:-0}" = 1 ] && exit 0
# bench_grammar's mask table, then the unconstrained Q8_0 decode step of the same run (the median
# of bench_model's tg64, as ms per token) and the mask's median cost as a share of it
grammar_beside_step() {
  local out step
  out=$("$1") || { echo "$out"; return 1; }
  echo "$out"
  step=$(for r in 1 2 3; do attnd_once "$MODELS/qwen2.5-0.5b-shape-q8_0.gguf"; done |
    awk '$1 == "tg64" && $2 > 0 {print 1000 / $2}' | median_of)
  echo "unconstrained decode step (Q8_0 0.5B shape, $THREADS threads, median of 3 tg64 runs): $step ms"
  echo "$out" | awk -F'|' -v s="$step" '$2 ~ /inside string|structural/ && s > 0 {
    gsub(/^ +| +$/, "", $2); printf "  mask (apply, median) %s: %.2f %% of the step\n", $2, 100 * $4 / s }'
}
for b in "$BUILD"/bench/bench_*; do
  [ -x "$b" ] && [ "${b%.d}" = "$b" ] || continue
  case $(basename "$b") in
    bench_model|bench_sched) ;;
    # FA2 on the Vulkan device present (lavapipe here: about 2-3 min from a cold shader cache)
    # beside the CPU kernel on $THREADS threads
    bench_vk_fa2) echo; THREADS=$THREADS "$b";;
    bench_grammar) echo; grammar_beside_step "$b";;
    *) echo; "$b";;
  esac
done
"$BUILD/bench/bench_sched" "$MODELS/qwen2.5-0.5b-shape-q8_0.gguf" "$THREADS" "qwen2.5-0.5b-shape q8_0"
# the server under closed-loop load (bench/load.py): attnd serve, and llama-server beside it when
# REF_BIN holds one, on the Q8_0 file, taking turns level by level; SERVER=0 skips it
[ "${SERVER:-1}" = 0 ] && exit 0
f=$MODELS/qwen2.5-0.5b-shape-q8_0.gguf
port=$((18000 + RANDOM % 2000))
logs=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$logs"' EXIT
"$ATTND" serve -m "$f" --port "$port" --threads "$THREADS" --ctx 256 --max-running 16 >"$logs/attnd.log" 2>&1 &
pids+=($!)
servers=("attnd=http://127.0.0.1:$port")
if [ -n "${REF_BIN:-}" ] && [ -x "$REF_BIN/llama-server" ]; then
  "$REF_BIN/llama-server" -m "$f" --port $((port + 1)) -t "$THREADS" -np 16 -c 4096 >"$logs/ref.log" 2>&1 &
  pids+=($!)
  servers=("reference=http://127.0.0.1:$((port + 1))" "${servers[@]}") # the ratio is attnd / reference
fi
for s in "${servers[@]}"; do
  url=${s#*=}
  for _ in $(seq 240); do
    curl -sf "$url/health" >/dev/null 2>&1 && break
    sleep 0.5
  done
  curl -sf "$url/health" >/dev/null || { echo "run.sh: ${s%%=*} did not start:" >&2; tail -n 5 "$logs"/*.log >&2; exit 1; }
done
./bench/load.py "${servers[@]}" --clients "${SERVER_CLIENTS:-1,4,8,16}" --requests "${SERVER_REQUESTS:-3}"
