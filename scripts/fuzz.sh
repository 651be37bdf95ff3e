#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/*_fuzz.cpp) with clang, ASan and UBSan, and runs each for
# FUZZ_SECONDS (default 30) on a scratch copy of its seed corpus (fuzz/corpus/NAME/), so the
# committed corpus only changes by hand. Exits non-zero on the first crash, leak, sanitizer report
# or timeout; the reproducer is left in build-fuzz/artifacts/.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
seconds="${FUZZ_SECONDS:-30}"
jobs="${FUZZ_BUILD_JOBS:-2}"

# The library itself must carry coverage instrumentation (fuzzer-no-link), or libFuzzer would only
# see the tiny entry points; -fno-sanitize-recover turns every UBSan report into a crash.
san="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEGAOPS_ENABLE_CUDA=OFF -DMEGAOPS_FUZZ=ON \
  -DMEGAOPS_TESTS=OFF -DCMAKE_CXX_FLAGS="$san" >/dev/null

fuzzers=()
for src in "$root"/fuzz/*_fuzz.cpp; do
  fuzzers+=("$(basename "$src" .cpp)")
done
cmake --build "$build" -j "$jobs" --target "${fuzzers[@]}"

mkdir -p "$build/artifacts"
status=0
for name in "${fuzzers[@]}"; do
  seeds="$root/fuzz/corpus/${name%_fuzz}"
  work="$build/corpus/$name"
  rm -rf "$work"
  mkdir -p "$work"
  if [[ -d "$seeds" ]]; then cp -r "$seeds"/. "$work"/; fi
  echo "== $name: ${seconds}s on $(ls "$work" | wc -l) seeds"
  if ! "$build/$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$build/artifacts/$name-" \
      "$work" 2>"$build/$name.log"; then
    tail -n 60 "$build/$name.log"
    echo "== $name: FAILED (reproducer in $build/artifacts/)" >&2
    status=1
  else
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$build/$name.log" || true
    echo "== $name: ok, corpus grew to $(ls "$work" | wc -l) inputs"
  fi
done
exit "$status"
