#!/bin/sh
# Installs every Debian package attnd needs to build, test and run.
# Used by .ci/run, the Dockerfile and `make deps`; safe to run twice.
#   deploy/install-deps.sh          build + test packages (default)
#   deploy/install-deps.sh runtime  only what the daemon needs at run time (+ curl for health checks)
#   deploy/install-deps.sh build    build + test packages without Node.js and chromium (the Dockerfile's
#                                   build stage: it only compiles)
#   deploy/install-deps.sh train    what `make model` needs to retrain models/kjv.gguf (PyTorch, SentencePiece,
#                                   the KJV text); `make test` does not need it
set -eu
mode=${1:-all}

runtime="libmicrohttpd12 libcjson1 liburing2 libpcre2-8-0 libvulkan1 mesa-vulkan-drivers ca-certificates curl"
build="build-essential pkg-config libmicrohttpd-dev libcjson-dev liburing-dev libpcre2-dev \
libvulkan-dev glslang-tools vulkan-validationlayers vulkan-tools mesa-vulkan-drivers \
python3 python3-yaml python3-requests curl"

# libopenblas0-pthread: without it Debian's torch multiplies matrices with the reference BLAS (~25x slower)
train="python3-torch python3-sentencepiece python3-numpy python3-matplotlib libopenblas0-pthread bible-kjv bible-kjv-text"

case "$mode" in
  runtime) pkgs=$runtime ;;
  train) pkgs=$train ;;
  build|all) pkgs="$runtime $build" ;;
  *) echo "usage: $0 [all|build|runtime|train]" >&2; exit 2 ;;
esac

missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# Node.js (for the independent GGUF parser test and the browser test) only where none is installed.
if [ "$mode" = all ] && ! command -v npm >/dev/null 2>&1; then missing="$missing nodejs npm"; fi
# chromium: the browser the playground test drives (tests/integration/test_playground.sh)
if [ "$mode" = all ] && ! dpkg-query -W -f='${Status}' chromium 2>/dev/null | grep -q "install ok installed"; then
  missing="$missing chromium"
fi
if [ -z "$missing" ]; then
  echo "install-deps: all packages present"
  exit 0
fi
echo "install-deps: installing$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing
