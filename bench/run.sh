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
TYPES=${TYPES:-q8_0 f16 q4_k_m}
has() { case " $TYPES " in *" $1 "*) return 0;; esac; return 1; }
for t in q8_0 f16; do # q8_0 also feeds bench_sched, f16 also feeds the quantizer
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
echo
echo "## Model speed (CPU, $THREADS threads, tokens/s: median, min, max of $REPS runs)"
echo
echo "| model                  | test     |    median |       min |       max |"
echo "|------------------------|----------|-----------|-----------|-----------|"
for t in $TYPES; do
  # drop nothing from the page cache: load MB/s is from memory, as on a warm server
  "$BUILD/bench/bench_model" "$MODELS/qwen2.5-0.5b-shape-$t.gguf" "$THREADS" "$REPS" "qwen2.5-0.5b-shape $t"
done
echo
echo "Reference engine, 2 threads, as measured on other machines (README): 2026-11-29 q8_0 pp128 370, tg 59; f16 pp128 417, tg 49;"
echo "2026-12-02 (AMD EPYC, AVX2) q8_0 pp128 109, tg 25; q4_k_m pp128 82-102, tg 27-31 tokens/s. Ratios only hold within one run."
[ "${MODELS_ONLY:-0}" = 1 ] && exit 0
for b in "$BUILD"/bench/bench_*; do
  [ -x "$b" ] && [ "${b%.d}" = "$b" ] || continue
  case $(basename "$b") in
    bench_model|bench_sched) ;;
    # FA2 on the Vulkan device present (lavapipe here: about 2-3 min from a cold shader cache)
    # beside the CPU kernel on $THREADS threads
    bench_vk_fa2) echo; THREADS=$THREADS "$b";;
    *) echo; "$b";;
  esac
done
"$BUILD/bench/bench_sched" "$MODELS/qwen2.5-0.5b-shape-q8_0.gguf" "$THREADS" "qwen2.5-0.5b-shape q8_0"
