#!/bin/bash
# test_frameworks.sh - the frameworks applications are built on drive attnd's OpenAI-compatible
# routes: LangChain JS (@langchain/openai's ChatOpenAI) and the Vercel AI SDK (ai + @ai-sdk/openai),
# pinned in tests/frameworks/package-lock.json. One `attnd serve` on a free loopback port serves the
# shared tiny model; tests/frameworks/test_langchain.mjs and test_aisdk.mjs compare every answer
# with /v1/generate on the same prompt (greedy, same tokens).
#   ATTND             attnd binary (default build/release/attnd)
#   SHARED            shared test data folder (default ../shared)
#   ATTND_TEST_TOOLS  0: without the tool-calling and structured-output tests (run by default)
# Exit 0 pass, 1 fail, 77 skip (no Node.js >= 20).
set -euo pipefail

abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
root=$(cd "$(dirname "$0")/../.." && pwd)
ATTND=$(abs "${ATTND:-$root/build/release/attnd}")
SHARED=$(abs "${SHARED:-$root/../shared}")
cd "$root"

if [ ! -x "$ATTND" ]; then
  echo "test_frameworks: no attnd binary at $ATTND (build it, or set ATTND=...)" >&2
  exit 1
fi
model="$SHARED/models/tiny-qwen2-f32.gguf"
if [ ! -f "$model" ]; then
  echo "test_frameworks: missing test model $model (set SHARED=...)" >&2
  exit 1
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "skip: node and npm are needed for LangChain JS and the AI SDK"
  exit 77
fi
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 20 ]; then
  echo "skip: @langchain/openai needs Node.js >= 20 (found $(node --version))"
  exit 77
fi
if [ ! -d tests/frameworks/node_modules/@langchain/openai ] || [ ! -d tests/frameworks/node_modules/@ai-sdk/openai ]; then
  (cd tests/frameworks && npm ci --no-audit --no-fund --loglevel=error)
fi

# the daemon: port 0, the address it prints on stderr
log=$(mktemp)
pid=
# shellcheck disable=SC2317  # run by the trap
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -f "$log"
}
trap cleanup EXIT
"$ATTND" serve -m "$model" --host 127.0.0.1 --port 0 --threads 2 --keep-requests 64 >/dev/null 2>"$log" &
pid=$!
port=
for _ in $(seq 300); do
  port=$(sed -n 's|.*listening on http://[^ ]*:\([0-9][0-9]*\).*|\1|p' "$log" | head -n1)
  [ -n "$port" ] && break
  if ! kill -0 "$pid" 2>/dev/null; then break; fi
  sleep 0.1
done
if [ -z "$port" ]; then
  echo "test_frameworks: attnd printed no address:" >&2
  cat "$log" >&2
  exit 1
fi
base="http://127.0.0.1:$port"
for _ in $(seq 300); do
  [ "$(node -e 'fetch(process.argv[1]).then(r=>console.log(r.status),()=>console.log(0))' "$base/health")" = 200 ] && break
  sleep 0.1
done

rc=0
for t in test_langchain test_aisdk; do
  if ! ATTND_BASE="$base" ATTND="$ATTND" ATTND_MODEL="$model" node "tests/frameworks/$t.mjs"; then
    echo "test_frameworks: $t failed" >&2
    rc=1
  fi
done
if ! kill -0 "$pid" 2>/dev/null; then
  echo "test_frameworks: attnd died during the tests:" >&2
  cat "$log" >&2
  rc=1
fi
exit $rc
