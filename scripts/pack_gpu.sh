#!/usr/bin/env bash
# Copies the binaries the GPU run needs into .carry/bin (ignored by git, named in the device
# tool's `carry`), with the git sha they were built from.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .carry/bin
cp build/megaops build/megaops_gpu_tests build/megaops_cpu_tests .carry/bin/
[ -x build/megaops_weight_check_bench ] && cp build/megaops_weight_check_bench .carry/bin/
# The text front end's shared libraries (PCRE2, utf8proc) and serve's (cpp-httplib and the brotli
# it links) are Debian's; the GPU machine's image need not have them, so they travel beside the
# binaries (gpu_run.sh puts $BIN on the loader path).
for lib in $(ldd build/megaops | awk '/libpcre2|libutf8proc|libcpp-httplib|libbrotli/ {print $3}'); do
  cp -L "$lib" .carry/bin/
done
sha=$(git rev-parse HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- src tools 2>/dev/null || sha="$sha-dirty"
echo "$sha" > .carry/bin/GIT_SHA
du -sh .carry
