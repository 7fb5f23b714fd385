#!/bin/bash
# test_playground.sh - the playground page (GET /) in a real browser: starts the real daemon on
# the tiny llama model, then tests/browser/test_playground.mjs drives Debian's chromium through
# playwright-core (prompt -> streamed completion, heatmap hover, keyboard, head grid, logit lens,
# an API error) and compares what the page shows with the JSON endpoints; then the daemon on the
# shipped model (models/kjv.gguf) for tests/browser/test_heads.mjs (the head census grid).
# Screenshots: build/test-output/playground/*.png.
#   ATTND      attnd binary (default build/release/attnd)
#   SHARED     shared test data folder (default ../shared)
#   DOC_SHOT   if set, also writes the page's screenshot there (docs/playground.png)
#   HEADS_SHOT if set, writes the screenshot of the page on models/kjv.gguf there (docs/see-attention.png)
# Exit 0 pass, 1 fail, 77 skip (no Node.js >= 20 or no chromium).
set -euo pipefail

abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
root=$(cd "$(dirname "$0")/../.." && pwd)
ATTND=$(abs "${ATTND:-$root/build/release/attnd}")
SHARED=$(abs "${SHARED:-$root/../shared}")
[ -n "${DOC_SHOT:-}" ] && DOC_SHOT=$(abs "$DOC_SHOT")
cd "$root"

if [ ! -x "$ATTND" ]; then
  echo "test_playground: no attnd binary at $ATTND (build it, or set ATTND=...)" >&2
  exit 1
fi
model=$SHARED/models/tiny-llama-spm-f32.gguf
if [ ! -f "$model" ]; then
  echo "test_playground: missing test model $model (set SHARED=...)" >&2
  exit 1
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "skip: node and npm are needed for the browser test"
  exit 77
fi
if [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
  echo "skip: playwright-core needs Node.js >= 20 (found $(node --version))"
  exit 77
fi
if [ ! -x /usr/bin/chromium ]; then
  echo "skip: /usr/bin/chromium is not installed (deploy/install-deps.sh installs it)"
  exit 77
fi
if [ ! -f tests/browser/node_modules/playwright-core/package.json ]; then
  (cd tests/browser && npm ci --no-audit --no-fund)
fi

out=$root/build/test-output/playground
mkdir -p "$out"
log=$(mktemp)
pid=""
stop_daemon() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  pid=""
}
trap 'stop_daemon; rm -f "$log"' EXIT

# run_page MODEL SCRIPT ARGS...: the daemon on MODEL, then node SCRIPT BASE_URL ARGS...; returns 0 pass, 1 fail
run_page() {
  local m=$1 script=$2 port="" base r=0
  shift 2
  "$ATTND" serve --port 0 --threads 2 -m "$m" </dev/null >/dev/null 2>"$log" &
  pid=$!
  for _ in $(seq 1 300); do
    port=$(sed -n 's|.*listening on http://.*:\([0-9][0-9]*\).*|\1|p' "$log" | head -n1)
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$port" ]; then
    echo "FAIL the daemon did not print its address:"
    tail -n 20 "$log"
    return 1
  fi
  base=http://127.0.0.1:$port
  for _ in $(seq 1 600); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$base/health")" = 200 ] && break
    sleep 0.1
  done
  node "$script" "$base" "$@" || r=1
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "FAIL the daemon died during the test:"
    tail -n 20 "$log"
    r=1
  fi
  [ $r -eq 0 ] || { echo "daemon log (last lines):"; tail -n 15 "$log"; }
  stop_daemon
  return $r
}

rc=0
run_page "$model" tests/browser/test_playground.mjs "$out" ${DOC_SHOT:+"$DOC_SHOT"} || rc=1
# the shipped model: the census grid opens on its strongest induction head (tests/browser/test_heads.mjs)
run_page models/kjv.gguf tests/browser/test_heads.mjs "$out" ${HEADS_SHOT:+"$HEADS_SHOT"} || rc=1
exit $rc
