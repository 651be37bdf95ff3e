#!/usr/bin/env bash
# The Python module's tests on the GPU machine (python/tests: test_cuda.py, and test_llm.py's tests
# on device "cuda"), with the wheel and the CLI scripts/pack_wheel.sh carried in .carry/wheels (the
# tests write their checkpoints with the CLI and compare against it). The wheel is installed with no index into a folder of its own, for the image's
# python3 (the one with PyTorch); pytest comes from the image, or from the carried wheels where the
# image lacks it. JUnit XML and the log go to $OUT.
#   OUT=/some/dir scripts/gpu_python.sh
# Knobs (environment): BIN (the CLI's folder, default $WHEELS/bin), WHEELS (default .carry/wheels), OUT (default out),
# PYTHON (default python3), PYTHON_TEST_LIMIT (seconds for the whole run, default 420),
# PYTHON_TEST_TIMEOUT (seconds a test, where pytest-timeout is installed; default 180),
# PYTEST_ARGS (extra pytest arguments, e.g. "-k cuda").
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
WHEELS=${WHEELS:-.carry/wheels}
BIN=${BIN:-$WHEELS/bin}
OUT=${OUT:-out}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
# NVLink multicast stays off on the shared hosts (KINDS.md), as in gpu_run.sh.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
echo "wheel built from $(cat "$WHEELS/GIT_SHA" 2>/dev/null || echo unknown), CLI from" \
  "$(cat "$BIN/GIT_SHA" 2>/dev/null || echo unknown)"
if [ ! -x "$BIN/megaops" ] && [ -f "$BIN/megaops.gz" ]; then
  gunzip -kf "$BIN/megaops.gz" && chmod +x "$BIN/megaops" || exit 1
fi
site=$(mktemp -d /tmp/megaops-site.XXXXXX)
wheels=("$WHEELS"/megaops-*.whl)
"$PYTHON" -c "import pytest" 2>/dev/null || wheels+=("$WHEELS"/pytest/*.whl)
if ! "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$site" "${wheels[@]}"
then
  echo "gpu_python: installing ${wheels[*]} failed" >&2
  exit 1
fi
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
# The wheel on its own, before anything is put on the loader's path: megaops/__init__.py must find
# cuBLASLt itself.
env -u LD_LIBRARY_PATH "$PYTHON" -c "import megaops, os
print('megaops from', os.path.dirname(megaops.__file__), '- has_cuda', megaops.has_cuda,
      '- gpu_available', megaops.gpu_available())" || exit 1
# The CLI's shared libraries travel beside it; its cuBLASLt is the toolkit's or PyTorch's.
bin_dir=$(cd "$BIN" && pwd) || exit 1
export LD_LIBRARY_PATH="$bin_dir:${LD_LIBRARY_PATH:-}"
if ldd "$BIN/megaops" | grep -q "not found"; then
  lt=$("$PYTHON" -c "import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], 'lib'))" 2>/dev/null)
  export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${lt:-}:${LD_LIBRARY_PATH:-}"
fi
export MEGAOPS_CLI="$bin_dir/megaops"
args=(-p no:cacheprovider -rfEs -v --junitxml="$OUT/python_tests.xml")
"$PYTHON" -c "import pytest_timeout" 2>/dev/null && args+=(--timeout="${PYTHON_TEST_TIMEOUT:-180}")
# shellcheck disable=SC2086
timeout -k 5 "${PYTHON_TEST_LIMIT:-420}" "$PYTHON" -m pytest "${args[@]}" ${PYTEST_ARGS:-} \
  python/tests >"$OUT/python_tests.log" 2>&1
status=$?
# pytest's short summary (failures, errors, skips with their reasons), then its closing line.
grep -E "^(FAILED|ERROR|SKIPPED) " "$OUT/python_tests.log" | tail -60
tail -1 "$OUT/python_tests.log"
[ $status -eq 124 ] && echo "gpu_python: the tests ran past ${PYTHON_TEST_LIMIT:-420} s"
rm -rf "$site"
exit $status
