#!/usr/bin/env bash
# Packs prebuilt variants (.carry/NAME/ from scripts/build_variant.sh) into one compressed archive
# for the GPU machine: binaries stripped, tar + xz (six megaops binaries and a test binary fit in
# about 16 MB of the device tool's 64 MiB carry limit; uncompressed they do not).
#   scripts/pack_variants.sh NAME [NAME ...]        -> .carry/pack.tar.xz
# On the GPU machine (carry [".carry/pack.tar.xz"]):
#   mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x   -> .carry/x/NAME/...
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: scripts/pack_variants.sh NAME [NAME ...]" >&2; exit 2; }
stage=$(mktemp -d /tmp/megaops-pack-XXXXXX)
trap 'rm -rf "$stage"' EXIT
for name in "$@"; do
  src=".carry/$name"
  [ -x "$src/megaops" ] || { echo "pack_variants.sh: $src/megaops: not built (scripts/build_variant.sh $name)" >&2; exit 1; }
  mkdir -p "$stage/$name"
  for f in megaops megaops_gpu_tests; do
    [ -f "$src/$f" ] && cp "$src/$f" "$stage/$name/" && strip "$stage/$name/$f"
  done
  cp "$src/GIT_SHA" "$stage/$name/" 2>/dev/null || true
done
tar cJf .carry/pack.tar.xz -C "$stage" .
echo "packed $* into .carry/pack.tar.xz ($(du -h .carry/pack.tar.xz | cut -f1))"
