#!/usr/bin/env bash
# Fifteenth session, device call 4, one H200, ~3 minutes. Build `pre` as call 3. Call 3: where
# the ceiling is measured does not matter. What profile's whole-step figure (4.597-4.602 ms in
# calls 1 and 2, bench 4.727-4.732 there) still does differently: max_seq 162 (prompt + gen + 2)
# where bench sizes the executor for 160, and no HBM ceiling kernel in the process.
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
B=$X/pre
r8() { local n=$1; shift; bench_rows "$n" $B 560 --preset llama3.1-8b --batch 1 --pdl off --step-times "$@"; }
prof() {
  local n=$1; shift
  log "profile $n $*"
  timeout $(left 580) $B/megaops profile --preset llama3.1-8b --batch 1 --json $O/prof_$n.json "$@" > $O/prof_$n.log 2>&1
  grep -E "step \(graph" $O/prof_$n.log | tee -a $O/run.log
}
r8 gen128a
r8 gen130 --gen 130
prof gen128
prof gen126 --gen 126
r8 gen128b
MEGAOPS_BENCH_CEILING=16 r8 ceil16
r8 gen130b --gen 130
call_finish
