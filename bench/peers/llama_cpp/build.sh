#!/usr/bin/env bash
# Builds llama.cpp's `llama-bench` with its CUDA backend (flash attention on) for sm_90a, on this
# machine: the GPU machine has no network and need not have a compiler set up. The source is the
# whole llama.cpp tree of PyPI's llama-cpp-python source package, the one
# scripts/fetch_text_deps.sh pins and checksums (`--archive`); it is extracted beside the text
# front end's files, into build-deps/ (ignored by git). The binary, linked statically against
# ggml and llama but dynamically against the CUDA runtime and cuBLAS (the GPU machine's, as
# megaops' own binaries), goes to .carry/llama.cpp/ with the two vocabulary files make_gguf.py
# needs (ignored by git; carry it to the GPU machine and run bench/peers/llama_cpp/run.sh there).
#   bench/peers/llama_cpp/build.sh          # JOBS=N to change the parallel compile jobs
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
export PATH="/usr/local/cuda/bin:$PATH"
archive="$("$root/scripts/fetch_text_deps.sh" --archive)"
version="$(basename "$archive" .tar.gz)"
version="${version#llama_cpp_python-}"
deps="${MEGAOPS_DEPS_DIR:-$root/build-deps}"
src="$deps/llama.cpp-tree-$version"
if [[ ! -f "$src/.complete" ]]; then
  tmp="$deps/.extract-llama-tree-$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  tar xzf "$archive" -C "$tmp" "llama_cpp_python-$version/vendor/llama.cpp"
  rm -rf "$src"
  mv "$tmp/llama_cpp_python-$version/vendor/llama.cpp" "$src"
  rm -rf "$tmp"
  touch "$src/.complete"
fi
build="$src/build-cuda-sm90a"
# Only what llama-bench needs: no tests, examples, server, network or NCCL; flash attention for
# f16 / bf16 caches (the default set of FA kernels).
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_NATIVE=OFF -DGGML_CUDA_FA=ON \
  -DGGML_CUDA_NCCL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TOOLS=ON >/dev/null
nice -n 19 cmake --build "$build" --target llama-bench -j"${JOBS:-$(nproc)}"
out="$root/.carry/llama.cpp"
mkdir -p "$out"
cp "$build/bin/llama-bench" "$out/"
# The vocabularies make_gguf.py copies into the random models, and the script itself.
cp "$("$root/scripts/fetch_text_deps.sh")"/models/ggml-vocab-{llama-bpe,qwen2}.gguf "$out/"
echo "llama.cpp $version (llama-cpp-python source package), CUDA sm_90a" >"$out/VERSION"
ldd "$out/llama-bench" | grep -E "cuda|cublas|not found" || true
du -sh "$out"
