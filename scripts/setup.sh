#!/usr/bin/env bash
# Installs what megaops needs to build and test on a fresh Debian machine with the CUDA toolkit at
# /usr/local/cuda: compilers, CMake/Ninja, nlohmann-json, CLI11, GoogleTest, Google Benchmark,
# ccache and clang (fuzzers), PCRE2 and utf8proc (the tokenizer), cpp-httplib (`megaops serve`) and
# patch (scripts/fetch_text_deps.sh's patches). Skips apt entirely when everything is already there.
set -euo pipefail
need=()
have_pkg() { dpkg -s "$1" >/dev/null 2>&1; }
for p in cmake ninja-build g++ nlohmann-json3-dev libcli11-dev libgtest-dev libbenchmark-dev \
         ccache clang libclang-rt-dev pkg-config libpcre2-dev libutf8proc-dev libcpp-httplib-dev patch; do
  have_pkg "$p" || need+=("$p")
done
if ((${#need[@]})); then
  echo "setup: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
if ! command -v nvcc >/dev/null 2>&1; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then
    echo "setup: add /usr/local/cuda/bin to PATH (the build scripts do this themselves)"
  else
    echo "setup: no CUDA toolkit found; building host-only (CPU oracle, no GPU executor)" >&2
  fi
fi
