#!/bin/bash
# bench/gpu-check.sh - checks the Vulkan kernels on whatever Vulkan device the machine has (a real
# GPU with its driver, or lavapipe): builds the Vulkan tests and benchmark, runs test_vk_fa2 (and
# test_vk_ops when it exists) and bench_vk_fa2, and prints a summary table: device, pass/fail per
# test, FA2 prefill TFLOP/s at 4096 tokens head dim 128, decode ms at KV 4096 head dim 128.
#
# usage: bench/gpu-check.sh [out-dir]      (logs go to out-dir, default build/gpu-check;
#                                           $VARIANT: build variant, default release)
#
# On a bare GPU machine without a Vulkan loader (see the device notes of this workplace): put the
# loader's .deb files (libvulkan1 ...) into .gl/ of the repo; this script unpacks them into / when
# `ldconfig -p` shows no libvulkan.so.1 and it runs as root, and points VK_DRIVER_FILES at the
# NVIDIA driver's ICD file when no driver is configured. Without the validation layer
# (vulkan-validationlayers) the tests run with validation off (ATTND_VK_VALIDATION=0) and say so.
# The build needs the packages of deploy/install-deps.sh (glslang-tools for the shaders).
# Exit status: 0 when every test passed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
VARIANT=${VARIANT:-release}
BUILD=build/$VARIANT
LOGS=${1:-build/gpu-check}
mkdir -p "$LOGS"

# 1. a Vulkan loader and driver
if ! ldconfig -p 2>/dev/null | grep 'libvulkan\.so\.1' >/dev/null; then  # no -q: SIGPIPE + pipefail
    if [ "$(id -u)" = 0 ] && ls .gl/*.deb >/dev/null 2>&1; then
        for f in .gl/*.deb; do dpkg -x "$f" /; done
        ldconfig
    else
        echo "gpu-check: no libvulkan.so.1 (install libvulkan1, or put its .deb into .gl/ and run as root)" >&2
    fi
fi
nv_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ] && [ -f "$nv_icd" ]; then
    export VK_DRIVER_FILES=$nv_icd
    [ -f /usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json ] &&
        export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
validation=on
if [ -z "${ATTND_VK_VALIDATION:-}" ]; then
    have_layer=0
    for d in ${VK_LAYER_PATH:+"$VK_LAYER_PATH"} /usr/share/vulkan/explicit_layer.d /etc/vulkan/explicit_layer.d \
        /usr/local/share/vulkan/explicit_layer.d; do
        for f in "$d"/*khronos_validation*.json; do [ -f "$f" ] && have_layer=1; done
    done
    [ $have_layer = 1 ] || export ATTND_VK_VALIDATION=0
fi
[ "${ATTND_VK_VALIDATION:-1}" = 0 ] && validation="off (no VK_LAYER_KHRONOS_validation)"

# 2. build only what is needed (other parts of the tree need not build for this check)
targets="$BUILD/tests/test_vk_fa2 $BUILD/bench/bench_vk_fa2"
[ -f tests/unit/test_vk_ops.c ] && targets="$targets $BUILD/tests/test_vk_ops"
jobs=$(nproc 2>/dev/null || echo 2)
if ! make -j"$jobs" VARIANT="$VARIANT" $targets >"$LOGS/build.log" 2>&1; then
    tail -30 "$LOGS/build.log"
    echo "gpu-check: build failed (log: $LOGS/build.log)"
    exit 1
fi

# 3. tests and benchmark, each timed
run_test() { # name binary -> prints PASS/FAIL/SKIP and seconds into $LOGS/name.result
    local name=$1 bin=$2 t0 rc secs
    t0=$(date +%s%N)
    "$bin" >"$LOGS/$name.log" 2>&1
    rc=$?
    secs=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
    case $rc in 0) echo "PASS $secs" ;; 77) echo "SKIP $secs" ;; *) echo "FAIL(rc=$rc) $secs" ;; esac >"$LOGS/$name.result"
}
run_test test_vk_fa2 "$BUILD/tests/test_vk_fa2"
[ -x "$BUILD/tests/test_vk_ops" ] && run_test test_vk_ops "$BUILD/tests/test_vk_ops"
"$BUILD/bench/bench_vk_fa2" ${BENCH_ARGS:-} >"$LOGS/bench_vk_fa2.log" 2>&1
bench_rc=$?
cat "$LOGS/bench_vk_fa2.log" | grep -v ' info ' || true

# 4. summary
col() { # row-pattern field -> that |-separated field of the bench table row (2: case, 3: device ms, 5: GFLOP/s)
    grep -F "$1" "$LOGS/bench_vk_fa2.log" | head -1 | awk -F'|' -v c="$2" '{gsub(/ /, "", $c); print $c}'
}
device=$(sed -n 's/^## FlashAttention-2, Vulkan: \(.*\) vs CPU kernel.*/\1/p' "$LOGS/bench_vk_fa2.log" | head -1)
[ -n "$device" ] || device=$(grep -m1 -o 'test_vk_fa2: [^,]*' "$LOGS/test_vk_fa2.log" | cut -d' ' -f2-)
pf=$(col "prefill 4096 hd 128" 5)
tflops=$(awk -v g="${pf:-}" 'BEGIN { if (g == "" || g + 0 <= 0) print "n/a"; else printf "%.3f", g / 1000 }')
d8=$(col "decode KV 4096 hd 128 8 KV/8 q heads" 3)
d32=$(col "decode KV 4096 hd 128 8 KV/32 q heads" 3)
status=0
echo
echo "## gpu-check summary ($(date -u +%Y-%m-%dT%H:%MZ), validation $validation)"
echo
echo "| item                                         | result |"
echo "|----------------------------------------------|--------|"
echo "| device                                       | ${device:-none found} |"
for t in test_vk_fa2 test_vk_ops; do
    [ -f "$LOGS/$t.result" ] || continue
    read -r res secs <"$LOGS/$t.result"
    printf '| %-44s | %s (%s s) |\n' "$t" "$res" "$secs"
    case $res in PASS | SKIP) ;; *) status=1; tail -5 "$LOGS/$t.log" | sed 's/^/    /' >&2 ;; esac
done
printf '| %-44s | %s |\n' "bench_vk_fa2" "$([ $bench_rc = 0 ] && echo ok || echo "FAIL(rc=$bench_rc)")"
printf '| %-44s | %s |\n' "FA2 prefill 4096 tok hd128 GQA 7:1, TFLOP/s" "$tflops"
printf '| %-44s | %s |\n' "decode KV 4096 hd128 8 KV/8 q heads, ms" "${d8:-n/a} (ref 9.8 on lavapipe)"
printf '| %-44s | %s |\n' "decode KV 4096 hd128 8 KV/32 q heads, ms" "${d32:-n/a} (ref 51 on lavapipe)"
echo
echo "logs: $LOGS"
[ $bench_rc = 0 ] || status=1
exit $status
