#!/usr/bin/env bash
# The planner validation protocol of round 6 (docs/planner-validation.md, "Protocol for the
# composition planner") on one GPU, in phases that resume, so it runs as a few device commands of
# at most 10 minutes each:
#   check    the carried build is the frozen commit (its GIT_SHA against PROTOCOL_FROZEN_SHA; with
#            .git present, also no change since it in src/, tools/, the protocol's scripts and
#            bench/planner-unseen/); writes OUTDIR/frozen.txt
#   profile  the kernel boundaries' cost (`megaops bench-boundary`), random-weight checkpoints of
#            the unseen configs (bench/planner-unseen/*/config.json)
#            under $PROTOCOL_CKPT, then `megaops profile --json` of every model and batch with the
#            same flags as every round's profiles (a plan of the conventional step without PDL;
#            prompt 32, 32 steps per op, 128 for the whole-step figures); a profile already there
#            is kept
#   plan     the pools (`validate_planner.py plan`) from those profiles; pools already there are
#            kept (they are the frozen candidates)
#   measure  every pool candidate and the references (`validate_planner.py measure --resume`),
#            starting no bench process once the budget is spent
#   report   OUTDIR/report.md, report.json, predicted_vs_measured.png (if matplotlib is there)
# Each phase skips what is done, so the same command run again continues where the last stopped.
#   BIN=.carry/bin PROTOCOL_FROZEN_SHA=<sha> PROTOCOL_BUDGET=580 scripts/planner_protocol.sh OUTDIR
# Knobs (environment): PROTOCOL_PHASES (default "check profile plan measure report"),
# PROTOCOL_PRESETS, PROTOCOL_CONFIGS (config directories; default bench/planner-unseen/*/),
# PROTOCOL_BATCHES ("1 8 32 64"), PROTOCOL_OBJECTIVES ("step ttft"), PROTOCOL_ROUNDS (1),
# PROTOCOL_BUDGET (seconds this invocation may take; 0 = no limit), PROTOCOL_CKPT
# (/tmp/megaops-unseen), PROTOCOL_MEASURE_ARGS (more options of `validate_planner.py measure`,
# e.g. --no-shared), PROTOCOL_UNFROZEN=1 (skip the sha check: a trial, not a validation).
# Exit status: 0 done, 3 measure stopped at the budget (run the same command again), else failed.
#
# Time on one H200, estimated (docs/planner-validation.md, round 6, has the arithmetic) from round
# 5's run (bench/results/2026-11-30-s12-call3: a profile takes 3.5 s for a 1B-class model and
# 14-15 s for an 8B; a bench process costs ~2.5 s (1B-class), ~4 s (3-4B), ~8 s (8B) before and
# around its rows: ceiling child, weights, captures) and 2026-12-04-s27-call4's step times (a
# 128-token generation: 0.15 s 1B-class, 0.31-0.37 s 3-4B, 0.62-0.64 s 8B):
#   kernel boundaries ~0.1 min; checkpoints (init-random --config, 14 GB) ~1 min; profiles 16
#   presets ~2.4 min + 8 unseen ~1.0 min; plan ~0.3 min;
#   measure (48 cases, ~12 configurations each; on pools of main at 6eb1565 from round 5's
#   profiles, 81 bench processes, the longest ~30 s): step ~9 min, TTFT ~4.5 min;
#   total ~19 min: two commands of PROTOCOL_BUDGET=580 just hold it; expect a short third.
#   PROTOCOL_ROUNDS=2 (every block again in reverse order): measure ~22 min, total ~27 min.
# The measure phase prints each bench process's seconds: the next estimate comes from them.
set -u
P=${1:?usage: scripts/planner_protocol.sh OUTDIR}
t0=$(date +%s)
PHASES=${PROTOCOL_PHASES:-check profile plan measure report}
PRESETS=${PROTOCOL_PRESETS-llama3.2-1b qwen3-0.6b llama3.1-8b qwen3-8b}
CONFIGS=${PROTOCOL_CONFIGS-$(find bench/planner-unseen -mindepth 2 -maxdepth 2 -name config.json \
  2>/dev/null | sort | xargs -r -n1 dirname)}
BATCHES=${PROTOCOL_BATCHES:-1 8 32 64}
OBJECTIVES=${PROTOCOL_OBJECTIVES:-step ttft}
ROUNDS=${PROTOCOL_ROUNDS:-1}
BUDGET=${PROTOCOL_BUDGET:-0}
CKPT=${PROTOCOL_CKPT:-/tmp/megaops-unseen}
BIN=${BIN:-.carry/bin}
MEGAOPS_GIT_SHA=$(cat "$BIN/GIT_SHA" 2>/dev/null || echo unknown)
export MEGAOPS_GIT_SHA
# The toolkit's libraries, and the text front end's where they travel beside the binary
# (scripts/pack_gpu.sh), as scripts/gpu_run.sh sets them.
LD_LIBRARY_PATH="$(cd "$BIN" 2>/dev/null && pwd):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export LD_LIBRARY_PATH
mkdir -p "$P/profiles" "$P/pools" "$P/measured"
want() { case " $PHASES " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
stamp() { echo "== $* ($(date -u +%T), $(( $(date +%s) - t0 )) s)"; }
# The files that make the protocol: the frozen commit must hold them unchanged.
FROZEN_PATHS="src tools bench/planner-unseen scripts/validate_planner.py"
FROZEN_PATHS="$FROZEN_PATHS scripts/planner_protocol.sh"

if want check; then
  stamp check
  frozen=${PROTOCOL_FROZEN_SHA:-}
  if [ "${PROTOCOL_UNFROZEN:-0}" = 1 ]; then
    echo "PROTOCOL_UNFROZEN=1: no frozen-sha check; this run is a trial, not a validation" |
      tee "$P/frozen.txt"
  elif [ -z "$frozen" ]; then
    echo "check: set PROTOCOL_FROZEN_SHA to the frozen commit (or PROTOCOL_UNFROZEN=1)" >&2
    exit 1
  else
    # The build's sha: full (scripts/pack_gpu.sh, "-dirty" when src/ or tools/ differed) or short
    # with "+patch" names (scripts/build_variant.sh). Either must name the frozen commit, clean.
    case "$MEGAOPS_GIT_SHA" in
      *-dirty* | *+* | unknown)
        echo "check: build $BIN is $MEGAOPS_GIT_SHA, not a clean build" >&2
        exit 1 ;;
    esac
    case "$frozen" in
      "$MEGAOPS_GIT_SHA"* | "${MEGAOPS_GIT_SHA:0:7}"*) ;;
      *) case "$MEGAOPS_GIT_SHA" in
           "$frozen"*) ;;
           *) echo "check: build $BIN is $MEGAOPS_GIT_SHA, frozen is $frozen" >&2; exit 1 ;;
         esac ;;
    esac
    if git rev-parse --git-dir >/dev/null 2>&1; then
      # shellcheck disable=SC2086
      git diff --quiet "$frozen" -- $FROZEN_PATHS ||
        { echo "check: the tree differs from $frozen in $FROZEN_PATHS" >&2; exit 1; }
    fi
    {
      echo "frozen at $frozen; build $MEGAOPS_GIT_SHA; checked $(date -u +%FT%TZ)"
      # The protocol's own files as run (the device's copy has no .git): compare with
      # `git show FROZEN:PATH | sha256sum`.
      # shellcheck disable=SC2086
      find scripts/validate_planner.py scripts/planner_protocol.sh bench/planner-unseen -type f |
        sort | xargs sha256sum
    } > "$P/frozen.txt"
    cat "$P/frozen.txt"
  fi
fi

checkpoints() {
  # shellcheck disable=SC2086
  [ -z "$CONFIGS" ] ||
    python3 scripts/validate_planner.py checkpoint --megaops "$BIN/megaops" --configs $CONFIGS \
      --out "$CKPT"
}

if want profile; then
  stamp "checkpoints of the unseen configs"
  checkpoints || { echo "checkpoints failed" >&2; exit 1; }
  # The profiles run a plan of the conventional step without PDL, whatever the batch's default:
  # the planner predicts from it, and the serial overlap figure needs an executor set up for the
  # multi-stream overlap step (a PDL chain plan leaves it out).
  echo '{"format": "megaops-plan", "version": 1, "source": "planner protocol"}' \
    > "$P/profile_plan.json"
  # What a kernel boundary costs on this GPU, plain and with PDL: the planner's launch_us and
  # pdl_wait_us (a few seconds).
  if [ ! -s "$P/profiles/kernel_boundary.json" ]; then
    stamp "kernel boundaries"
    "$BIN/megaops" bench-boundary --json "$P/profiles/kernel_boundary.json.partial" \
      > "$P/profiles/kernel_boundary.log" 2>&1 &&
      mv "$P/profiles/kernel_boundary.json.partial" "$P/profiles/kernel_boundary.json" ||
      echo "bench-boundary failed: the planner keeps its boundary constants"
  fi
  models=""
  for preset in $PRESETS; do models="$models preset:$preset"; done
  for dir in $CONFIGS; do models="$models config:$(basename "$dir")"; done
  for m in $models; do
    name=${m#*:}
    if [ "${m%%:*}" = preset ]; then src=(--preset "$name"); else src=(--model "$CKPT/$name"); fi
    for b in $BATCHES; do
      out="$P/profiles/profile_${name}_b$b.json"
      [ -s "$out" ] && continue
      stamp "profile $name b$b"
      "$BIN/megaops" profile "${src[@]}" --batch "$b" --plan "$P/profile_plan.json" \
        --json "$out.partial" > "$P/profiles/profile_${name}_b$b.log" 2>&1 &&
        mv "$out.partial" "$out" || echo "profile $name b$b failed"
    done
  done
fi

if want plan; then
  if [ -s "$P/pools/manifest.json" ]; then
    stamp "plan: pools already in $P/pools (kept: they are the frozen candidates)"
  else
    stamp plan
    # shellcheck disable=SC2086
    python3 scripts/validate_planner.py plan --megaops "$BIN/megaops" --profiles "$P/profiles" \
      --out "$P/pools" --presets $PRESETS --configs $CONFIGS --batches $BATCHES \
      --objectives $OBJECTIVES || { echo "plan failed" >&2; exit 1; }
  fi
fi

status=0
if want measure; then
  stamp measure
  checkpoints || { echo "checkpoints failed" >&2; exit 1; }
  stop=()
  if [ "$BUDGET" -gt 0 ]; then
    # No bench process starts within 45 s of the budget (the longest, an 8B step case, takes
    # ~30 s), which leaves the report its few seconds.
    left=$(( BUDGET - ($(date +%s) - t0) - 45 ))
    [ "$left" -lt 1 ] && left=1
    stop=(--stop-after "$left")
  fi
  # shellcheck disable=SC2086  # PROTOCOL_MEASURE_ARGS: options, split on spaces
  python3 scripts/validate_planner.py measure --megaops "$BIN/megaops" --pools "$P/pools" \
    --out "$P/measured" --checkpoints "$CKPT" --rounds "$ROUNDS" --resume "${stop[@]}" \
    ${PROTOCOL_MEASURE_ARGS:-}
  status=$?
  [ $status = 3 ] && stamp "measure stopped at the budget: run the same command again"
fi

if want report && [ $status = 0 ]; then
  stamp report
  python3 scripts/validate_planner.py report --pools "$P/pools" --measured "$P/measured" \
    --out "$P/report.md" --json "$P/report.json" --plot "$P/predicted_vs_measured.png" || status=1
fi
stamp "done (exit $status)"
exit $status
