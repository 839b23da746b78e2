#!/usr/bin/env bash
# Builds everything examples/h200/run.sh runs (release) and packs it, compressed, into .dev/:
# `fblayout` (the main job and `fblayout step`), the benchmark programs, the kernel test binaries and the executor's GPU tests. Run it on the development
# machine, then call the device tool with carry [".gl", ".dev"] and the command
# `bash examples/h200/run.sh`. `.gl` comes from ../shared/gpu/fetch-vulkan-loader.sh.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
cargo build --release --locked -p fblayout-examples --bins --examples
tests=$(cargo test --release --locked -p fblayout-kernels --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"] and m["target"]["name"].startswith("ops_"):
        print(m["executable"])')
# The executor's GPU tests: whole training steps, in f32 and in mixed precision, and the fused
# language-model head's.
tests="$tests $(cargo test --release --locked -p fblayout-plan --test exec_gpu --test head_loss --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])')"
rm -rf .dev && mkdir -p .dev
for f in target/release/fblayout target/release/examples/bench_{matmul,norm,softmax,attention,cold_start,coop,train,models} $tests; do
    name=$(basename "$f")
    name=${name%-*}   # test binaries carry a hash suffix
    [ -x "$f" ] || continue
    strip -o ".dev/$name" "$f"
    gzip -9 ".dev/$name"
done
du -sh .dev
