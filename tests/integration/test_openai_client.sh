#!/bin/bash
# test_openai_client.sh - the official OpenAI client (the `openai` npm package, 7.x, pinned in
# tests/openai/package-lock.json) drives attnd's /v1/chat/completions, /v1/completions and
# /v1/models on a shared model; tests/openai/test_openai.mjs compares every answer with
# /v1/generate (same tokens, same seed).
#   ATTND   attnd binary (default build/release/attnd)
#   SHARED  shared test data folder (default ../shared)
# Exit 0 pass, 1 fail, 77 skip (no Node.js >= 20).
set -euo pipefail

# shellcheck source=tests/integration/node_common.sh
. "$(dirname "$0")/node_common.sh"
nt_init test_openai_client
model="$SHARED/models/tiny-qwen2-f32.gguf"
nt_need_model "$model"
nt_need_node "the official OpenAI client (the openai package)"
nt_npm tests/openai openai
exec node tests/openai/test_openai.mjs "$ATTND" "$model"
