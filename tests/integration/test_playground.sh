#!/bin/bash
# test_playground.sh - the playground page (GET /) in a real browser: starts the real daemon on
# the tiny llama model, then tests/browser/test_playground.mjs drives Debian's chromium through
# playwright-core (prompt -> streamed completion, heatmap hover, keyboard, head grid, logit lens,
# an API error) and compares what the page shows with the JSON endpoints.
# Screenshots: build/test-output/playground/*.png.
#   ATTND      attnd binary (default build/release/attnd)
#   SHARED     shared test data folder (default ../shared)
#   DOC_SHOT   if set, also writes the page's screenshot there (docs/playground.png)
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
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -f "$log"
}
trap cleanup EXIT

"$ATTND" serve --port 0 --threads 2 -m "$model" </dev/null >/dev/null 2>"$log" &
pid=$!
port=""
for _ in $(seq 1 300); do
  port=$(sed -n 's|.*listening on http://.*:\([0-9][0-9]*\).*|\1|p' "$log" | head -n1)
  [ -n "$port" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$port" ]; then
  echo "FAIL the daemon did not print its address:"
  tail -n 20 "$log"
  exit 1
fi
base=http://127.0.0.1:$port
for _ in $(seq 1 600); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$base/health")" = 200 ] && break
  sleep 0.1
done

rc=0
node tests/browser/test_playground.mjs "$base" "$out" ${DOC_SHOT:+"$DOC_SHOT"} || rc=1
if ! kill -0 "$pid" 2>/dev/null; then
  echo "FAIL the daemon died during the test:"
  tail -n 20 "$log"
  rc=1
fi
[ $rc -eq 0 ] || { echo "daemon log (last lines):"; tail -n 15 "$log"; }
exit $rc
