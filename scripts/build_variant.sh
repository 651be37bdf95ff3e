#!/usr/bin/env bash
# Builds main plus zero or more patches in a scratch worktree and copies the binaries the GPU
# run needs to .carry/NAME/ (with a GIT_SHA naming the patches), for A/B runs on the GPU machine
# (gpu_run.sh BIN=.carry/NAME, or AB_BINS="NAME:.carry/NAME"). The working tree is not touched.
#   scripts/build_variant.sh NAME [PATCH ...]   (paths relative to the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: scripts/build_variant.sh NAME [PATCH ...]" >&2; exit 2; }
name=$1
shift
for p in "$@"; do
  [ -f "$p" ] || { echo "build_variant.sh: $p: no such patch" >&2; exit 1; }
done
root=$(pwd)
# One fixed scratch path, so ccache (with its base_dir there) hits across variants: a variant
# recompiles only what its patches touch. Variants are therefore built one at a time.
wt=/tmp/megaops-variant
git -C "$root" worktree remove --force "$wt" >/dev/null 2>&1 || rm -rf "$wt"
git -C "$root" worktree prune
trap 'git -C "$root" worktree remove --force "$wt" >/dev/null 2>&1 || rm -rf "$wt"' EXIT
git worktree add --detach "$wt" HEAD >/dev/null
for p in "$@"; do
  # Three-way, so a patch written against main still stacks on the patches before it.
  git -C "$wt" apply -3 "$root/$p" >/dev/null 2>&1 ||
    { echo "build_variant.sh: $p does not apply (three-way) on HEAD + the patches before it" >&2; exit 1; }
done
# Only the GPU machine's architecture (VARIANT_CUDA_ARCHS, default 90a): half the device code.
(cd "$wt" && CCACHE_BASEDIR="$wt" CCACHE_NOHASHDIR=true BUILD_DIR=build \
  scripts/build.sh -DCMAKE_CUDA_ARCHITECTURES="${VARIANT_CUDA_ARCHS:-90a}" >/dev/null)
mkdir -p ".carry/$name"
cp "$wt/build/megaops" "$wt/build/megaops_gpu_tests" ".carry/$name/"
sha=$(git -C "$wt" rev-parse --short HEAD)
label="$sha"
for p in "$@"; do label="$label+$(basename "$p" .patch)"; done
echo "$label" >".carry/$name/GIT_SHA"
echo "built .carry/$name ($label)"
du -sh ".carry/$name"
