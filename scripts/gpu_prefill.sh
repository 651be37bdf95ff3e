#!/usr/bin/env bash
# The prefill kernels on the GPU machine, in one call (about 5 minutes): the prefill attention GPU
# tests (the own tensor-core kernel, cuDNN's SDPA, packed and chunked prefill against one-prompt
# prefill), `megaops bench-attention` (flash, cudnn and the scalar kernel, 1k / 4k / 16k / 32k
# tokens), `megaops bench-matmul --prefill-tokens` (the prefill GEMMs against the GEMM ceiling),
# TTFT of the executor with each prefill attention (`megaops bench`), and the PyTorch peer
# (bench/peers/torch_prefill.py: eager TTFT and SDPA alone at the same shapes). cuDNN is PyTorch's
# pip copy (nvidia.cudnn) where there is one, else libcudnn.so.9 from the loader's path. JSON and
# logs go to $OUT; a short table comes last. Binaries come prebuilt in $BIN
# (default .carry/bin: scripts/pack_gpu.sh fills it from build/). From another build directory:
#   BUILD_DIR=build-prefill scripts/build.sh
#   BUILD_DIR=build-prefill BIN=.carry/prefill-bin scripts/gpu_prefill.sh pack
# and on the GPU machine (carry .carry/prefill-bin):
#   BIN=.carry/prefill-bin OUT=$OUT scripts/gpu_prefill.sh
# Knobs: PRESETS (default llama3.2-1b llama3.1-8b), ATTN_TOKENS, GEMM_TOKENS, TTFT_TOKENS,
# CUDNN_LIB, SKIP (space-separated of: tests attention gemm ttft peer).
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
ATTN_TOKENS=${ATTN_TOKENS:-1024,4096,16384,32768}
GEMM_TOKENS=${GEMM_TOKENS:-512,1024,2048,4096,8192,16384}
TTFT_TOKENS=${TTFT_TOKENS:-512,2048,4096}
SKIP=${SKIP:-}
# The binaries link libcublasLt dynamically; fall back to PyTorch's copy if the toolkit's is not on
# the loader path (as scripts/gpu_run.sh).
if ldd "$BIN/megaops" | grep -q "not found"; then
  lt=$(python3 -c "import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], 'lib'))" 2>/dev/null)
  export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${lt:-}:${LD_LIBRARY_PATH:-}"
fi
# cuDNN for the cudnn prefill attention: PyTorch's pip copy (its libcudnn.so.9 finds the engine
# libraries beside it), passed by path to megaops and to the tests.
CUDNN_LIB=${CUDNN_LIB:-$(python3 -c "import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], 'lib', 'libcudnn.so.9'))" 2>/dev/null)}
[ -n "$CUDNN_LIB" ] && [ ! -f "$CUDNN_LIB" ] && CUDNN_LIB=
export MEGAOPS_TEST_CUDNN_LIB=$CUDNN_LIB
cudnn_flag=()
[ -n "$CUDNN_LIB" ] && cudnn_flag=(--cudnn-lib "$CUDNN_LIB")
echo "cuDNN: ${CUDNN_LIB:-libcudnn.so.9 on the loader path}"
status=0
skipped() { case " $SKIP " in *" $1 "*) return 0 ;; esac; return 1; }
log() { echo "== $* ($(date -u +%H:%M:%S))"; }
comma() { echo "$*" | tr ' ' ','; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >"$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"

if ! skipped tests; then
  log "prefill attention GPU tests"
  timeout -k 5 300 "$BIN/megaops_gpu_tests" \
    --gtest_filter='PrefillAttentionFlash.*:PrefillAttention.*:PrefillAttentionCudnn.*:Presets/PrefillPacking.*:PrefillPackingFallback.*:Presets/ConventionalVsOracle.*' \
    --gtest_output=json:"$OUT/prefill_tests.json" >"$OUT/prefill_tests.log" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|SKIPPED|tests ran|MEGAOPS_TEST_SEED|^cuDNN|worst relative" \
    "$OUT/prefill_tests.log" | sort -u | tail -30
fi

if ! skipped attention; then
  log "bench-attention"
  timeout -k 5 240 "$BIN/megaops" bench-attention --preset "$(comma $PRESETS)" \
    --tokens "$ATTN_TOKENS" --repeats 10 "${cudnn_flag[@]}" \
    --json "$OUT/bench_attention.json" 2>&1 | tee "$OUT/bench_attention.log" || status=1
fi

if ! skipped gemm; then
  for preset in $PRESETS; do
    log "bench-matmul --prefill-tokens: $preset"
    timeout -k 5 150 "$BIN/megaops" bench-matmul --preset "$preset" --prefill-tokens "$GEMM_TOKENS" \
      --json "$OUT/bench_prefill_gemm_$preset.json" >"$OUT/bench_prefill_gemm_$preset.log" 2>&1 || status=1
    grep -E "ceiling| 4096 | 16384 |error" "$OUT/bench_prefill_gemm_$preset.log" || true
  done
fi

if ! skipped ttft; then
  # Time to first token of the executor (one sequence) with each prefill attention: two plans
  # that differ only in prefill.attention, run one after the other on one executor.
  for attn in flash cudnn; do
    echo "{\"format\": \"megaops-plan\", \"version\": 1, \"prefill\": {\"attention\": \"$attn\"}}" \
      >"$OUT/plan_$attn.json"
  done
  for preset in $PRESETS; do
    for t in $(echo "$TTFT_TOKENS" | tr ',' ' '); do
      log "bench TTFT: $preset, $t tokens, flash and cudnn attention"
      mkdir -p "$OUT/ttft_${preset}_$t"
      timeout -k 5 150 "$BIN/megaops" bench --preset "$preset" --batch 1 --prompt "$t" --gen 2 \
        --repeats 3 --plan "$OUT/plan_flash.json" --plan "$OUT/plan_cudnn.json" "${cudnn_flag[@]}" \
        --json "$OUT/ttft_${preset}_$t" >"$OUT/ttft_${preset}_$t.log" 2>&1 || status=1
      grep -E "prefill attention|error" "$OUT/ttft_${preset}_$t.log" || true
    done
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
    cols = ["flash", "cudnn", "flash-64", "flash-128", "scalar", "sdpa-gqa"]
    if att.get("cudnn"):
        print(f"cudnn: {att['cudnn']}")
    print(f"{'preset':12s} {'T':>6s}" + "".join(f"{c:>14s}" for c in cols) + f"{'diff':>9s}")
    for p, t in sorted({(r["preset"], r["tokens"]) for r in att["rows"]}):
        cell, diff = {}, 0.0
        for r in att["rows"]:
            if (r["preset"], r["tokens"]) == (p, t):
                if "ms" not in r:  # the kernel could not run this shape (r["error"] says why)
                    cell[r["kernel"]] = "not run"
                    continue
                cell[r["kernel"]] = f"{r['ms']:.3f}/{r['tflops']:.0f}"
                d = r.get("rel_diff_vs_first")
                diff = max(diff, float("inf") if d is None else d)
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
          "executor / lt-best (lt-residual / lt-f32-residual)")
    ms = sorted({r["m"] for r in g["rows"]})
    pct = {(r["op"], r["m"], r["path"]): r["pct_ceiling"] for r in g["rows"]}
    print(f"  {'op':13s}" + "".join(f"{m:>16d}" for m in ms))
    for op in dict.fromkeys(r["op"] for r in g["rows"]):
        cells = []
        for m in ms:
            c = "/".join(f"{pct[(op, m, k)]:.0f}" if (op, m, k) in pct else "-"
                         for k in ("executor", "lt-best"))
            res = [f"{pct[(op, m, k)]:.0f}" for k in ("lt-residual", "lt-f32-residual")
                   if (op, m, k) in pct]
            if res:
                c += f" ({'/'.join(res)})"
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
for name in sorted(os.listdir(out)):
    if not name.startswith("ttft_") or not os.path.isdir(os.path.join(out, name)):
        continue
    for f in ("plan_flash.json", "plan_cudnn.json"):
        j = load(os.path.join(name, f))
        for r in (j or {}).get("results", []):
            v = r.get("ttft_ms_median")
            print(f"megaops TTFT {j.get('model')} T={j.get('prompt_tokens')}: "
                  f"{j.get('prefill_attention')} attention " + (f"{v:.1f} ms" if v is not None else "-"))
if peer:
    for r in peer["rows"]:
        if r["kind"] == "ttft":
            print(f"torch eager TTFT {r['preset']:12s} T={r['tokens']:5d}: {r['ms']:.1f} ms")
EOF
exit $status
