#!/bin/sh
# Installs the Debian packages attnd needs to build, test, run and package.
# Used by .ci/run, the Dockerfile, `make deps`, `make test` and `make image`; safe to run twice.
#   deploy/install-deps.sh              runtime + build + test packages (default; what `make test` needs)
#   deploy/install-deps.sh runtime      what the daemon itself loads (ldd of attnd + the Vulkan loader)
#   deploy/install-deps.sh vulkan-cpu   runtime + Mesa's Vulkan drivers (lavapipe: a Vulkan device on the CPU)
#   deploy/install-deps.sh build        only what compiling build/release/attnd needs (the image's build stage)
#   deploy/install-deps.sh image        what `make image` / `make image-test` need on the host: buildah and
#                                       mmdebstrap (build and run images without a Docker engine), docker-compose
#                                       (validates deploy/docker-compose.yml) and python3-yaml/requests
#   deploy/install-deps.sh train        what `make model` needs to retrain models/kjv.gguf (PyTorch, SentencePiece,
#                                       the KJV text); `make test` does not need it
set -eu
mode=${1:-all}

# ldd build/release/attnd: libmicrohttpd (with GnuTLS, which its package pulls in), cJSON, liburing,
# PCRE2, the Vulkan loader, ZeroMQ and msgpack-c (the KV-cache events); libc/libm are in every Debian base.
runtime="libmicrohttpd12 libcjson1 liburing2 libpcre2-8-0 libvulkan1 libzmq5 libmsgpackc2"
vulkan_cpu="mesa-vulkan-drivers"
build="build-essential pkg-config libmicrohttpd-dev libcjson-dev liburing-dev libpcre2-dev \
libvulkan-dev glslang-tools libzmq3-dev libmsgpack-dev"
test="vulkan-validationlayers vulkan-tools mesa-vulkan-drivers python3 python3-yaml python3-requests python3-jsonschema python3-jinja2 haproxy curl docker-compose \
python3-zmq python3-msgpack libtest-json-schema-acceptance-perl \
clang libclang-rt-14-dev"   # clang + libFuzzer runtime: the fuzz harnesses (make fuzz; make test replays them)
image="buildah mmdebstrap python3 python3-yaml python3-requests"

# libopenblas0-pthread: without it Debian's torch multiplies matrices with the reference BLAS (~25x slower)
train="python3-torch python3-sentencepiece python3-numpy python3-matplotlib libopenblas0-pthread bible-kjv bible-kjv-text"

case "$mode" in
  runtime) pkgs=$runtime ;;
  train) pkgs=$train ;;
  vulkan-cpu) pkgs="$runtime $vulkan_cpu" ;;
  build) pkgs=$build ;;
  image) pkgs=$image ;;
  all) pkgs="$runtime $build $test" ;;
  *) echo "usage: $0 [all|runtime|vulkan-cpu|build|image|train]" >&2; exit 2 ;;
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
  echo "install-deps: all packages present ($mode)"
  exit 0
fi
echo "install-deps: installing$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
# another apt-get may hold the lock on a shared machine: wait for it rather than fail
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -q
# shellcheck disable=SC2086
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends $missing
