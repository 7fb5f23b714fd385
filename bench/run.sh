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
for t in q8_0 f16; do
  f=$MODELS/qwen2.5-0.5b-shape-$t.gguf
  [ -f "$f" ] || "$ATTND" mkmodel -o "$f" $shape --type "$t" --seed 7
done
echo
echo "## Model speed (CPU, $THREADS threads, tokens/s: median, min, max of $REPS runs)"
echo
echo "| model                  | test     |    median |       min |       max |"
echo "|------------------------|----------|-----------|-----------|-----------|"
for t in q8_0 f16; do
  # drop nothing from the page cache: load MB/s is from memory, as on a warm server
  "$BUILD/bench/bench_model" "$MODELS/qwen2.5-0.5b-shape-$t.gguf" "$THREADS" "$REPS" "qwen2.5-0.5b-shape $t"
done
echo
echo "Reference engine on this machine (2 threads): q8_0 pp128 370, tg 59; f16 pp128 417, tg 49 tokens/s."
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
