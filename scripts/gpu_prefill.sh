#!/usr/bin/env bash
# The prefill kernels on the GPU machine, in one call (about 3 minutes): the tensor-core prefill
# attention's GPU tests, `megaops bench-attention` (flash beside the scalar kernel, 1k / 4k / 16k
# tokens), `megaops bench-matmul --prefill-tokens` (the prefill GEMMs against the GEMM ceiling),
# and the PyTorch peer (bench/peers/torch_prefill.py: eager TTFT and SDPA alone at the same
# shapes). JSON and logs go to $OUT; a short table comes last. Binaries come prebuilt in $BIN
# (default .carry/bin: scripts/pack_gpu.sh fills it from build/). From another build directory:
#   BUILD_DIR=build-prefill scripts/build.sh
#   BUILD_DIR=build-prefill BIN=.carry/prefill-bin scripts/gpu_prefill.sh pack
# and on the GPU machine (carry .carry/prefill-bin):
#   BIN=.carry/prefill-bin OUT=$OUT scripts/gpu_prefill.sh
# Knobs: PRESETS (default llama3.2-1b llama3.1-8b), ATTN_TOKENS, GEMM_TOKENS, TTFT_TOKENS, SKIP
# (space-separated of: tests attention gemm peer).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.carry/bin}
if [ "${1:-}" = pack ]; then
  # Here, not on the GPU machine: the two binaries, the shared libraries of the text front end
  # that the GPU machine's image may lack (as pack_gpu.sh), and the sha.
  src=${BUILD_DIR:-build}
  mkdir -p "$BIN"
  cp "$src/megaops" "$src/megaops_gpu_tests" "$BIN/"
  for lib in $(ldd "$src/megaops" | awk '/libpcre2|libutf8proc/ {print $3}'); do cp -L "$lib" "$BIN/"; done
  sha=$(git rev-parse HEAD 2>/dev/null || echo unknown)
  git diff --quiet HEAD -- src tools 2>/dev/null || sha="$sha-dirty"
  echo "$sha" >"$BIN/GIT_SHA"
  du -sh "$BIN"
  exit 0
fi
OUT=${OUT:-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BIN:${LD_LIBRARY_PATH:-}"
export MEGAOPS_GIT_SHA=${MEGAOPS_GIT_SHA:-$(cat "$BIN/GIT_SHA" 2>/dev/null || echo unknown)}
PRESETS=${PRESETS:-llama3.2-1b llama3.1-8b}
ATTN_TOKENS=${ATTN_TOKENS:-1024,4096,16384}
GEMM_TOKENS=${GEMM_TOKENS:-512,2048,4096,8192}
TTFT_TOKENS=${TTFT_TOKENS:-512,2048,4096}
SKIP=${SKIP:-}
# The binaries link libcublasLt dynamically; fall back to PyTorch's copy if the toolkit's is not on
# the loader path (as scripts/gpu_run.sh).
if ldd "$BIN/megaops" | grep -q "not found"; then
  lt=$(python3 -c "import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], 'lib'))" 2>/dev/null)
  export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${lt:-}:${LD_LIBRARY_PATH:-}"
fi
status=0
skipped() { case " $SKIP " in *" $1 "*) return 0 ;; esac; return 1; }
log() { echo "== $* ($(date -u +%H:%M:%S))"; }
comma() { echo "$*" | tr ' ' ','; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >"$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"

if ! skipped tests; then
  log "prefill attention GPU tests"
  timeout -k 5 150 "$BIN/megaops_gpu_tests" --gtest_filter='PrefillAttentionFlash.*:PrefillAttention.*' \
    --gtest_output=json:"$OUT/prefill_tests.json" >"$OUT/prefill_tests.log" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|tests ran|MEGAOPS_TEST_SEED" "$OUT/prefill_tests.log" | tail -20
fi

if ! skipped attention; then
  log "bench-attention"
  timeout -k 5 90 "$BIN/megaops" bench-attention --preset "$(comma $PRESETS)" \
    --tokens "$ATTN_TOKENS" --repeats 10 \
    --json "$OUT/bench_attention.json" 2>&1 | tee "$OUT/bench_attention.log" || status=1
fi

if ! skipped gemm; then
  for preset in $PRESETS; do
    log "bench-matmul --prefill-tokens: $preset"
    timeout -k 5 60 "$BIN/megaops" bench-matmul --preset "$preset" --prefill-tokens "$GEMM_TOKENS" \
      --json "$OUT/bench_prefill_gemm_$preset.json" >"$OUT/bench_prefill_gemm_$preset.log" 2>&1 || status=1
    grep -E "ceiling| 4096 |error" "$OUT/bench_prefill_gemm_$preset.log" || true
  done
fi

if ! skipped peer; then
  log "PyTorch peer"
  timeout -k 5 150 python3 bench/peers/torch_prefill.py --presets "$(comma $PRESETS)" \
    --ttft-tokens "$TTFT_TOKENS" --sdpa-tokens "$ATTN_TOKENS" --json "$OUT/torch_prefill.json" \
    2>&1 | tee "$OUT/torch_prefill.log" || status=1
fi

log "summary"
python3 - "$OUT" <<'EOF' 2>&1 | tee "$OUT/summary.txt"
import json, os, sys
out = sys.argv[1]
def load(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else None
att, peer = load("bench_attention.json"), load("torch_prefill.json")
layers = {"llama3.2-1b": 16, "llama3.1-8b": 32, "qwen3-0.6b": 28, "qwen3-8b": 36}
if att:
    print(f"attention (GEMM ceiling {att['gemm_ceiling_tflops']:.0f} TFLOP/s), ms / TFLOP/s; "
          "diff: largest relative difference to the first kernel")
    sd = {}
    for r in (peer or {}).get("rows", []):
        if r.get("kind", "").startswith("sdpa") and "ms" in r:
            sd[(r["kind"], r["preset"], r["tokens"])] = r
    cols = ["flash", "flash-64", "flash-128", "scalar", "sdpa-gqa"]
    print(f"{'preset':12s} {'T':>6s}" + "".join(f"{c:>14s}" for c in cols) + f"{'diff':>9s}")
    for p, t in sorted({(r["preset"], r["tokens"]) for r in att["rows"]}):
        cell, diff = {}, 0.0
        for r in att["rows"]:
            if (r["preset"], r["tokens"]) == (p, t):
                cell[r["kernel"]] = f"{r['ms']:.3f}/{r['tflops']:.0f}"
                diff = max(diff, r["rel_diff_vs_first"])
        s = sd.get(("sdpa-gqa", p, t))
        if s:
            cell["sdpa-gqa"] = f"{s['ms']:.3f}/{s['tflops']:.0f}"
        print(f"{p:12s} {t:6d}" + "".join(f"{cell.get(c, '-'):>14s}" for c in cols) +
              f"{diff:9.1e}")
for p in layers:
    g = load(f"bench_prefill_gemm_{p}.json")
    if not g:
        continue
    print(f"prefill GEMMs {p}: % of the {g['gemm_ceiling_tflops']:.0f} TFLOP/s ceiling, "
          "executor / lt-best (lt-residual)")
    ms = sorted({r["m"] for r in g["rows"]})
    pct = {(r["op"], r["m"], r["path"]): r["pct_ceiling"] for r in g["rows"]}
    print(f"  {'op':13s}" + "".join(f"{m:>16d}" for m in ms))
    for op in dict.fromkeys(r["op"] for r in g["rows"]):
        cells = []
        for m in ms:
            c = "/".join(f"{pct[(op, m, k)]:.0f}" if (op, m, k) in pct else "-"
                         for k in ("executor", "lt-best"))
            if (op, m, "lt-residual") in pct:
                c += f" ({pct[(op, m, 'lt-residual')]:.0f})"
            cells.append(c)
        print(f"  {op:13s}" + "".join(f"{c:>16s}" for c in cells))
    # A projection, not a measurement: per layer the four GEMMs (lt-bf16; the residual paths
    # where measured) and flash attention at T, times the layers, plus the LM head on one row
    # (left out); the norms, RoPE, SiLU and embedding are not in it.
    if att:
        for t in ms:
            gem = {}
            for r in g["rows"]:
                if r["m"] == t and r["op"] != "lm_head" and r["path"] in ("lt-bf16", "lt-residual", "lt-best"):
                    gem[r["op"]] = min(gem.get(r["op"], 1e30), r["us"])
            fl = [r["ms"] for r in att["rows"]
                  if r["preset"] == p and r["tokens"] == t and r["kernel"].startswith("flash")]
            if len(gem) == 4 and fl:
                proj = layers[p] * (sum(gem.values()) * 1e-3 + min(fl))
                print(f"  projected TTFT at {t} tokens (GEMMs + flash attention only): {proj:.1f} ms")
if peer:
    for r in peer["rows"]:
        if r["kind"] == "ttft":
            print(f"torch eager TTFT {r['preset']:12s} T={r['tokens']:5d}: {r['ms']:.1f} ms")
EOF
exit $status
