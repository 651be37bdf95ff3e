#!/usr/bin/env bash
# Fetches the cuDNN frontend's C++ headers (the graph API that builds cuDNN's fused SDPA, used by
# the prefill attention path of src/kernels/attention_cudnn.cpp) from PyPI's nvidia-cudnn-frontend
# package, pinned and checksummed. The headers are the same in every wheel of a version; the one
# pinned here (CPython 3.11, manylinux x86_64) is fetched whatever the local Python is, and only
# its include/ tree and licence are kept. Extracts into $MEGAOPS_DEPS_DIR (default build-deps/,
# ignored by git) and prints the include directory. Idempotent: a finished extraction is reused.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION=1.32.0
WHEEL=nvidia_cudnn_frontend-$VERSION-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
SHA256=c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0
deps="${MEGAOPS_DEPS_DIR:-$root/build-deps}"
dest="$deps/cudnn-frontend-$VERSION"
if [[ -f "$dest/.complete" ]]; then
  echo "$dest/include"
  exit 0
fi
cache="${XDG_CACHE_HOME:-$HOME/.cache}/megaops"
archive="$cache/$WHEEL"
mkdir -p "$cache"
if [[ ! -f "$archive" ]] || ! echo "$SHA256  $archive" | sha256sum -c --status; then
  python3 -m pip download -q --no-deps --only-binary :all: --platform manylinux_2_28_x86_64 \
    --python-version 311 --implementation cp --abi cp311 "nvidia-cudnn-frontend==$VERSION" \
    -d "$cache" >&2
fi
if ! echo "$SHA256  $archive" | sha256sum -c --status; then
  echo "fetch_cudnn_frontend: $archive: sha256 mismatch (expected $SHA256)" >&2
  exit 1
fi
tmp="$deps/.extract-cudnn-frontend-$$"
rm -rf "$tmp"
mkdir -p "$tmp"
python3 - "$archive" "$tmp" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    names = [n for n in z.namelist()
             if n.startswith("include/") or n.endswith("/licenses/LICENSE.txt")]
    z.extractall(sys.argv[2], names)
EOF
mv "$tmp"/nvidia_cudnn_frontend-$VERSION.dist-info/licenses/LICENSE.txt "$tmp/LICENSE.txt"
rm -rf "$tmp"/nvidia_cudnn_frontend-$VERSION.dist-info
rm -rf "$dest"
mv "$tmp" "$dest"
touch "$dest/.complete"
echo "$dest/include"
