#!/usr/bin/env bash
# Fetches what the text front end builds and tests against, from PyPI's llama-cpp-python source
# package (pinned, checksummed): llama.cpp's Jinja engine (common/jinja, with the common_json and
# UTF-8 helpers it includes), the real chat templates of Llama 3 / Qwen 3 checkpoints
# (models/templates) and llama.cpp's vocabulary files of both families (models/ggml-vocab-*.gguf).
# No Debian package ships a Jinja-compatible C++ engine that renders HF chat templates; this one is
# maintained for exactly that. Extracts into $MEGAOPS_DEPS_DIR (default build-deps/, ignored by
# git), applies scripts/patches/llama-cpp-*.patch (a chat template is untrusted input: the engine's
# integer arithmetic is checked there, so `{{10%0}}` is an error as in HF's Jinja, not undefined
# behaviour) and prints the extracted llama.cpp directory. Idempotent: a finished extraction with
# the same patches is reused.
# With --archive: prints the checked source package itself (bench/peers/llama_cpp builds all of
# llama.cpp from it).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION=0.3.36
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
deps="${MEGAOPS_DEPS_DIR:-$root/build-deps}"
dest="$deps/llama.cpp-$VERSION"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/megaops"
archive="$cache/llama_cpp_python-$VERSION.tar.gz"
fetch_archive() {
  mkdir -p "$cache"
  if [[ ! -f "$archive" ]] || ! echo "$SHA256  $archive" | sha256sum -c --status; then
    # --no-binary: the source package is the one that carries llama.cpp's tree.
    python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" \
      -d "$cache" >&2
  fi
  if ! echo "$SHA256  $archive" | sha256sum -c --status; then
    echo "fetch_text_deps: $archive: sha256 mismatch (expected $SHA256)" >&2
    exit 1
  fi
}
if [[ "${1:-}" == --archive ]]; then
  fetch_archive
  echo "$archive"
  exit 0
fi
patches=("$root"/scripts/patches/llama-cpp-*.patch)
patch_sum=$(cat "${patches[@]}" | sha256sum | cut -d' ' -f1)
if [[ -f "$dest/.complete" && "$(cat "$dest/.complete")" == "$patch_sum" ]]; then
  echo "$dest"
  exit 0
fi
fetch_archive
tmp="$deps/.extract-$$"
rm -rf "$tmp"
mkdir -p "$tmp"
top="llama_cpp_python-$VERSION/vendor/llama.cpp"
tar xzf "$archive" -C "$tmp" --wildcards "$top/LICENSE" "$top/common/jinja/*" \
  "$top/common/json.h" "$top/common/json.cpp" "$top/common/unicode.h" "$top/common/unicode.cpp" \
  "$top/models/templates/*" "$top/models/ggml-vocab-llama-bpe.gguf*" \
  "$top/models/ggml-vocab-qwen2.gguf*"
for p in "${patches[@]}"; do
  if ! patch -s -p1 -d "$tmp/$top" <"$p" >&2; then
    echo "fetch_text_deps: $p does not apply to llama.cpp $VERSION" >&2
    exit 1
  fi
done
rm -rf "$dest"
mv "$tmp/$top" "$dest"
rm -rf "$tmp"
echo "$patch_sum" >"$dest/.complete"
echo "$dest"
