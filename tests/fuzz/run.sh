#!/bin/bash
# Runs the libFuzzer harnesses (build/fuzz/fuzz/fuzz_*, `make VARIANT=fuzz CC=clang fuzzers`).
#   tests/fuzz/run.sh fuzz SECONDS    fuzz each harness for SECONDS (nice 19); new crash inputs are
#                                     written to tests/fuzz/regress/NAME/ (commit them with the fix)
#   (a third argument, e.g. `http`, runs only fuzz_http)
#   tests/fuzz/run.sh check SECONDS   each harness replays its seeds and regression inputs, then
#                                     fuzzes for SECONDS more (what `make test` runs; exit 1 on a finding)
# Corpora: tests/fuzz/corpus/NAME (committed seeds), seeds generated from $SHARED (tokenizer test
# strings), and the growing working corpus build/fuzz/corpus/NAME.
set -u
mode=${1:-check}
secs=${2:-10}
: "${SHARED:=../shared}"
export SHARED
bin=build/fuzz/fuzz
work=build/fuzz/corpus
if ! ls $bin/fuzz_* >/dev/null 2>&1; then
  echo "fuzz: no harnesses in $bin (make VARIANT=fuzz CC=clang fuzzers)" >&2
  exit 1
fi
mkdir -p "$work"
python3 tests/fuzz/seeds.py "$SHARED" "$work" || exit 1
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}detect_leaks=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
rc=0
for f in $bin/fuzz_${3:-*}; do
  case $f in *.d) continue;; esac
  [ -x "$f" ] || continue
  name=$(basename "$f")
  mkdir -p "$work/$name" "tests/fuzz/regress/$name"
  dirs=("$work/$name")
  [ -d "tests/fuzz/corpus/$name" ] && dirs+=("tests/fuzz/corpus/$name")
  args=(-max_len=65536 -timeout=120 -rss_limit_mb=4096 -print_final_stats=1)
  if [ "$mode" = fuzz ]; then
    echo "== $name: fuzzing for $secs s"
    nice -n 19 "$f" "${args[@]}" -max_total_time="$secs" -artifact_prefix="tests/fuzz/regress/$name/" \
      "${dirs[@]}" 2>&1 | grep -E "^#[0-9]+ +(DONE|INITED)|ERROR|SUMMARY|stat::number_of_executed_units|contract broken|Test unit written" \
      || true
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  else
    # replay the regression inputs one by one (a file list runs each once), then fuzz briefly
    regress=(tests/fuzz/regress/$name/*)
    if [ -e "${regress[0]}" ]; then
      "$f" "${args[@]}" "${regress[@]}" >/tmp/fuzz-$$.log 2>&1 || { echo "$name: a regression input fails"; tail -30 /tmp/fuzz-$$.log; rc=1; }
    fi
    "$f" "${args[@]}" -max_total_time="$secs" -artifact_prefix="$work/$name-" "${dirs[@]}" >/tmp/fuzz-$$.log 2>&1 \
      || { echo "$name: finding"; tail -40 /tmp/fuzz-$$.log; rc=1; }
    grep -E "stat::number_of_executed_units" /tmp/fuzz-$$.log | sed "s/^/$name: /"
    rm -f /tmp/fuzz-$$.log
  fi
done
exit $rc
