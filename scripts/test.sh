#!/usr/bin/env bash
# The test command: install what is missing, build, run every test (GPU tests report "skipped: no
# CUDA device" without a GPU), then the host code again under AddressSanitizer +
# UndefinedBehaviorSanitizer, then a short fuzzing run. Fails on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
(cd build && ctest --output-on-failure -j"$(nproc)")
echo "== sanitizers (ASan + UBSan, host code) =="
BUILD_DIR=build-asan scripts/build.sh -DMEGAOPS_ENABLE_CUDA=OFF -DMEGAOPS_SANITIZE=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j"$(nproc)")
if [ -x scripts/fuzz.sh ]; then
  echo "== fuzzing (short) =="
  FUZZ_SECONDS=${FUZZ_SECONDS:-15} scripts/fuzz.sh
fi
