#!/usr/bin/env bash
# Runs fblayout's benchmarks and GPU tests on a lent GPU machine in one call.
#
# Built on the development machine (release), the binaries travel compressed in .dev/ with the
# Vulkan loader packages in .gl/ (see examples/h200/README.md). This script unpacks both, points
# the Vulkan loader at the NVIDIA driver, then runs: the GPU test binaries (correctness first),
# the main job, and each benchmark program, writing every log under $OUT and printing the tables
# last. A step that fails is reported and the rest still run; the exit status says whether all
# passed.
set -u
out=${OUT:-/tmp/fblayout-out}
mkdir -p "$out"
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
export FBLAYOUT_CACHE_DIR=/tmp/fblayout-cache XDG_RUNTIME_DIR=/tmp/xdg
# The steps run in the folder of the binaries; the PyTorch peers read the checkout through
# $REPO and write their JSON under $OUT.
export REPO=${REPO:-$PWD} OUT=$out
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
# Calibrations and autotune results of an earlier lease (carried in .h200-cache/, which the
# previous run returned under $OUT/cache): each is checked against this adapter and driver
# when read, and measured again where it does not match.
mkdir -p "$FBLAYOUT_CACHE_DIR"
[ -d .h200-cache ] && cp -n .h200-cache/* "$FBLAYOUT_CACHE_DIR"/ 2>/dev/null
bin=/tmp/fblayout-bin
mkdir -p "$bin"
# The packed binaries (DEV, default .dev) and the steps to run (STEPS, default
# examples/h200/steps) can be overridden, for a lease that runs a subset.
dev=${DEV:-.dev}
steps=${STEPS:-examples/h200/steps}
for f in "$dev"/*.gz; do gzip -dc "$f" > "$bin/$(basename "$f" .gz)"; chmod +x "$bin/$(basename "$f" .gz)"; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null | tee "$out/gpu.txt"
status=0
# step NAME TIMEOUT CMD...: runs CMD with a time limit, logs to $out/NAME.log.
step() {
    local name=$1 limit=$2
    shift 2
    echo "== $name: $*"
    local start=$SECONDS
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    printf '%s: exit %d in %d s\n' "$name" "$rc" "$((SECONDS - start))" | tee -a "$out/summary.txt"
    [ "$rc" -eq 0 ] || status=1
    return 0
}
# The steps to run come from $steps (one `name timeout command...` per line), so a lease can
# run a subset by editing that file, or by pointing STEPS at another.
while read -r name limit cmd; do
    [ -z "$name" ] || [ "${name#\#}" != "$name" ] && continue
    step "$name" "$limit" bash -c "cd $bin && $cmd"
done < "$steps"
# The small cache files (calibrations, the autotune's choices; not the pipeline cache) come
# back for the next lease.
mkdir -p "$out/cache"
find "$FBLAYOUT_CACHE_DIR" -maxdepth 1 -type f -size -1000k -exec cp {} "$out/cache"/ \;
echo
cat "$out/summary.txt"
for f in "$out"/*.log; do
    echo
    echo "##### $(basename "$f")"
    grep -E '^\||TFLOP|GB/s|agree|row-major / guided|passed|failed|error|panicked' "$f" | grep -v XDG | tail -60
done
exit $status
