#!/bin/bash
# Runs every test program: the C unit tests of each build folder given (exit 0 pass, 1 fail,
# 77 skip), then the script tests in tests/integration (run once, against $ATTND).
# Prints one line per test and closes with "N passed, N failed, N skipped".
set -u
: "${SHARED:=../shared}"
export SHARED
if [ ! -d "$SHARED/models" ]; then
  echo "tests: shared test data not found at $SHARED (set SHARED=...)" >&2
  exit 1
fi
# one kernel-tuning cache for the whole run (cpu_tune.h), not the user's
tune_dir=$(mktemp -d)
export ATTND_TUNE_CACHE="${ATTND_TUNE_CACHE:-$tune_dir/cpu-tune.tsv}"
trap 'rm -rf "$tune_dir"' EXIT
pass=0 fail=0 skip=0 failed=()
run_one() {  # name, command...
  local name=$1; shift
  local log; log=$(mktemp)
  local t0=$SECONDS
  "$@" >"$log" 2>&1
  local rc=$?
  case $rc in
    0) pass=$((pass+1)); echo "PASS $name ($((SECONDS-t0))s)";;
    77) skip=$((skip+1)); echo "SKIP $name: $(tail -n1 "$log")";;
    *) fail=$((fail+1)); failed+=("$name"); echo "FAIL $name (exit $rc)"; tail -n 40 "$log" | sed 's/^/    /';;
  esac
  rm -f "$log"
}
for dir in "$@"; do
  variant=$(basename "$dir")
  for t in "$dir"/tests/test_*; do
    [ -x "$t" ] || continue
    ATTND_BIN="$dir/attnd" run_one "$variant/$(basename "$t")" "$t"
  done
done
for s in tests/integration/test_*; do
  [ -x "$s" ] || continue
  run_one "integration/$(basename "$s")" "$s"
done
[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
