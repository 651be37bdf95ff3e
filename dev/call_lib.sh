# Sourced by a device command (`. dev/call_lib.sh`; dev/README.md shows one): `left N` (seconds
# left of an N second budget, for timeouts), the environment every call needs (NVLink multicast
# off, the toolkit's libraries), a scratch folder $O, `log` lines with the time (also into
# $O/run.log), and `call_finish`, which packs $O into $OUT/all.tgz for the trip back (the device
# tool brings back few files). Unpack it here and commit its JSON and a README, not the archive.
set -u
call_t0=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - call_t0) )); }
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
O=/tmp/o
# A lent machine may keep /tmp between sessions: start empty, so all.tgz holds this call only.
rm -rf "$O"
mkdir -p "$O"
log() { echo "== $* ($(date +%T))" | tee -a "$O/run.log"; }
call_finish() {
  mkdir -p "$OUT"
  tar czf "$OUT/all.tgz" -C "$O" .
  echo "call done after $(( $(date +%s) - call_t0 )) s"
}
# One `megaops bench` of build folder $2 (its megaops and GIT_SHA) into $O/$1.log and $O/$1.json,
# within what is left of a $3-second call; its table rows and errors go to run.log. The rest are
# bench's arguments, after prompt 32, 128 new tokens, $BENCH_REPEATS (default 3) repeats. An environment for the run is
# given as a prefix (VAR=value bench_rows ...), which bash exports to the commands inside.
bench_rows() {
  local name=$1 bin=$2 budget=$3
  shift 3
  log "bench $name"
  MEGAOPS_GIT_SHA=$(cat "$bin/GIT_SHA") timeout "$(left "$budget")" "$bin/megaops" bench \
    --prompt 32 --gen 128 --repeats "${BENCH_REPEATS:-3}" --json "$O/$name.json" "$@" >"$O/$name.log" 2>&1
  grep -E " (off|on) +[0-9]|rror" "$O/$name.log" | tee -a "$O/run.log"
}
# Rows alternated: two rounds over the presets in $2 (space-separated), each preset's entries in
# the order $1 (space-separated) in round 1 and reversed in round 2, every row within what is
# left of a $3-second call; the rest are bench's arguments. An entry is a build (a name under
# $X), or LABEL@BUILD[@VAR=value...][@--option=value...]: that build with those variables set and
# those bench options added (one binary under several environments or loops). Rows are named
# LABEL_PRESET_rROUND (LABEL = the build for a plain one).
alternated_rows() {
  local entries=$1 presets=$2 budget=$3 round m e v order
  shift 3
  for round in 1 2; do
    for m in $presets; do
      order=$entries
      [ "$round" = 2 ] && order=$(echo "$entries" | tr ' ' '\n' | tac | tr '\n' ' ')
      for e in $order; do
        local parts
        IFS=@ read -ra parts <<<"$e"
        # A subshell, so the variables end with the row.
        (
          local extra=()
          for v in "${parts[@]:2}"; do
            case $v in --*) extra+=("$v") ;; *) export "${v?}" ;; esac
          done
          bench_rows "${parts[0]}_${m}_r$round" "$X/${parts[1]:-${parts[0]}}" "$budget" \
            --preset "$m" "$@" "${extra[@]}"
        )
      done
    done
  done
}
# One PDL-chain step of preset $3 at batch 1 traced by build folder $2's megaops (`megaops trace`)
# into $O/$1.json and .log, within what is left of a $4-second call; its step span goes to
# run.log. An environment for it is given as a prefix, as for bench_rows.
chain_trace() {
  local name=$1 bin=$2 m=$3 budget=$4
  timeout "$(left "$budget")" "$bin/megaops" trace --preset "$m" --batch 1 --streams 1 \
    --pdl-chain --out "$O/$name.json" >"$O/$name.log" 2>&1
  grep "step span" "$O/$name.log" | tee -a "$O/run.log"
}
# The carried builds (.carry/pack.tar.xz, scripts/pack_variants.sh) unpacked under $X, and the
# GPU's name, driver and clock into run.log: how every call starts.
unpack_builds() {
  X=.carry/x
  rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
  nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a "$O/run.log"
}
# The GPU tests of build folder $2 matching gtest filter $4 into $O/$1.log and $O/$1.json, within
# $3 seconds (the watchdog at 2 s); the outcome and summary lines go to run.log.
gpu_tests() {
  local name=$1 bin=$2 limit=$3 filter=$4
  log "GPU tests $name: $filter"
  timeout -k 5 "$limit" "$bin/megaops_gpu_tests" --gtest_filter="$filter" \
    --gtest_output=json:"$O/$name.json" >"$O/$name.log" 2>&1
  echo "$name rc=$?" | tee -a "$O/run.log"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|tests ran" "$O/$name.log" | tail -8 | tee -a "$O/run.log"
}
# A detached call (`start`, then `collect` issued at once: a lent machine goes back after 30 s
# idle): waits up to $1 seconds for $R/NAME.done of every NAME after it, then says how long since
# $R/t0 and which are done.
wait_done() {
  local wait_s=$1 t all f
  shift
  t=$(date +%s)
  while [ $(($(date +%s) - t)) -lt "$wait_s" ]; do
    all=1
    for f in "$@"; do [ -f "$R/$f.done" ] || all=0; done
    [ $all = 1 ] && break
    sleep 5
  done
  echo "after $(($(date +%s) - $(cat "$R/t0"))) s: $(cd "$R" && ls -- *.done 2>/dev/null | tr '\n' ' ')"
}
# The table of build folder $1 (four presets, batch 1 / 8 / 32, conventional PDL off / on and the
# PDL chain) into $O/table_PRESET.{log,json}, each row within what is left of a $2-second call.
table_rows() {
  local bin=$1 budget=$2 m
  for m in llama3.2-1b qwen3-0.6b llama3.1-8b qwen3-8b; do
    bench_rows table_$m "$bin" "$budget" --preset $m --batch 1,8,32 --pdl both --backend both \
      --overlap-streams 1 --overlap-pdl-chain
  done
}
# compute-sanitizer racecheck over the GPU tests of build folder $1 matching filter $2, within
# $3 seconds, into $O/sanitize_racecheck.log; the outcome and summary lines go to run.log.
racecheck_tests() {
  local bin=$1 filter=$2 limit=$3
  log "compute-sanitizer racecheck over $filter ($limit s)"
  timeout -k 5 "$limit" compute-sanitizer --tool racecheck --error-exitcode 9 \
    "$bin/megaops_gpu_tests" --gtest_filter="$filter" >"$O/sanitize_racecheck.log" 2>&1
  echo "racecheck rc=$?" | tee -a "$O/run.log"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED) |^\[       OK" \
    "$O/sanitize_racecheck.log" | tail -6 | tee -a "$O/run.log"
}
