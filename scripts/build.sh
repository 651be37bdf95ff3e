#!/usr/bin/env bash
# Configures and builds megaops into ${BUILD_DIR:-build} (Release, CUDA for sm_90a and sm_80 when a
# toolkit is present). Extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
BUILD_DIR=${BUILD_DIR:-build}
cuda=ON
command -v nvcc >/dev/null 2>&1 || cuda=OFF
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEGAOPS_ENABLE_CUDA=$cuda "$@" >/dev/null
# BUILD_TARGET limits the build to one target (run.sh needs only the CLI).
cmake --build "$BUILD_DIR" -j"$(nproc)" ${BUILD_TARGET:+--target "$BUILD_TARGET"}
