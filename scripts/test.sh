#!/usr/bin/env bash
# The test command: install what is missing, build, run every test (GPU tests report "skipped: no
# CUDA device" without a GPU), then the host code again under AddressSanitizer +
# UndefinedBehaviorSanitizer, then a short fuzzing run. Fails on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The text front end's tests compare against HF tokenizers and transformers.
python3 -m pip install -q -r python/requirements-test.txt
scripts/build.sh
summary=$(mktemp)
# Runs ctest in a build directory and appends "total failed skipped" to $summary.
run_ctest() {
  local log
  log=$(mktemp)
  (cd "$1" && shift && "$@" ctest --output-on-failure -j"$(nproc)") 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local total failed skipped
  total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)
  failed=$(sed -n 's/.* \([0-9]*\) tests failed out of.*/\1/p' "$log" | tail -1)
  skipped=$(grep -c '(Skipped)$' "$log" || true)
  echo "${total:-0} ${failed:-0} $skipped" >>"$summary"
  rm -f "$log"
  return "$rc"
}
run_ctest build env
echo "== sanitizers (ASan + UBSan, host code) =="
BUILD_DIR=build-asan scripts/build.sh -DMEGAOPS_ENABLE_CUDA=OFF -DMEGAOPS_SANITIZE=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
run_ctest build-asan env ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
if [ -x scripts/fuzz.sh ]; then
  echo "== fuzzing (short) =="
  FUZZ_SECONDS=${FUZZ_SECONDS:-15} scripts/fuzz.sh
fi
# One closing line over both runs (skipped: GPU tests on a machine without a CUDA device).
awk '{t += $1; f += $2; s += $3} END {printf "tests: %d passed, %d failed, %d skipped\n", t - f - s, f, s}' "$summary"
