#!/bin/bash
# test_openai_client.sh - the official OpenAI client (the `openai` npm package, 7.x, pinned in
# tests/openai/package-lock.json) drives attnd's /v1/chat/completions, /v1/completions and
# /v1/models on a shared model; tests/openai/test_openai.mjs compares every answer with
# /v1/generate (same tokens, same seed).
#   ATTND   attnd binary (default build/release/attnd)
#   SHARED  shared test data folder (default ../shared)
# Exit 0 pass, 1 fail, 77 skip (no Node.js >= 20).
set -euo pipefail

abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
root=$(cd "$(dirname "$0")/../.." && pwd)
ATTND=$(abs "${ATTND:-$root/build/release/attnd}")
SHARED=$(abs "${SHARED:-$root/../shared}")
cd "$root"

if [ ! -x "$ATTND" ]; then
  echo "test_openai_client: no attnd binary at $ATTND (build it, or set ATTND=...)" >&2
  exit 1
fi
model="$SHARED/models/tiny-qwen2-f32.gguf"
if [ ! -f "$model" ]; then
  echo "test_openai_client: missing test model $model (set SHARED=...)" >&2
  exit 1
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "skip: node and npm are needed for the official OpenAI client"
  exit 77
fi
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 20 ]; then
  echo "skip: the openai package needs Node.js >= 20 (found $(node --version))"
  exit 77
fi
if [ ! -d tests/openai/node_modules/openai ]; then
  (cd tests/openai && npm ci --no-audit --no-fund --loglevel=error)
fi
exec node tests/openai/test_openai.mjs "$ATTND" "$model"
