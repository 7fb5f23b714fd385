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

# shellcheck source=tests/integration/node_common.sh
. "$(dirname "$0")/node_common.sh"
nt_init test_frameworks
model="$SHARED/models/tiny-qwen2-f32.gguf"
nt_need_model "$model"
nt_need_node "LangChain JS and the AI SDK (@langchain/openai)"
nt_npm tests/frameworks @langchain/openai @ai-sdk/openai
nt_serve "$model" --threads 2 --keep-requests 64

rc=0
for t in test_langchain test_aisdk; do
  if ! ATTND_BASE="$base" ATTND="$ATTND" ATTND_MODEL="$model" node "tests/frameworks/$t.mjs"; then
    echo "test_frameworks: $t failed" >&2
    rc=1
  fi
done
nt_alive || rc=1
exit $rc
