#!/usr/bin/env bash
# Copies the binaries the GPU run needs into .carry/bin (ignored by git, named in the device
# tool's `carry`), with the git sha they were built from.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .carry/bin
cp build/megaops build/megaops_gpu_tests build/megaops_cpu_tests .carry/bin/
sha=$(git rev-parse HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- src tools 2>/dev/null || sha="$sha-dirty"
echo "$sha" > .carry/bin/GIT_SHA
du -sh .carry
