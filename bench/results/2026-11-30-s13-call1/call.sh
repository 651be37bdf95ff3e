#!/usr/bin/env bash
# Thirteenth session, device call 1 (dev/README "Next GPU session" item 1), one H200, ~9 minutes.
# Carry .carry/pack.tar.xz with four builds of HEAD:
#   scripts/build_variant.sh main
#   scripts/build_variant.sh chain dev/overlap-pdl-chain.patch
#   scripts/build_variant.sh early dev/pdl-early-trigger.patch
#   scripts/build_variant.sh chainearly dev/overlap-pdl-chain.patch dev/pdl-early-trigger.patch
#   scripts/pack_variants.sh main chain early chainearly
# `start` launches one detached job and returns; `collect` (issued at once: a lent machine goes
# back after 30 s idle) waits up to WAIT_S seconds; `collect` again until done. Everything in
# $OUT/all.tgz.
#   1. Timings first (nothing else on the GPU), rows alternated, two rounds, batch 1 and 8
#      (the 8B batch 1): main conventional PDL off / on and overlap at W = 1; early (every kernel
#      triggers its PDL dependents before its wait) conventional PDL on; chain and chainearly
#      overlap at W = 1 with MEGAOPS_OVERLAP_PDL_CHAIN=1.
#   2. Then, side by side (no timings): chain and chainearly's overlap tests (with the new
#      Overlap.PdlChainMatchesConventional and the small models' full-size comparisons) and every
#      GPU test of early.
#   bash dev/next-call1.sh start     bash dev/next-call1.sh collect   [bash dev/next-call1.sh collect]
. dev/call_lib.sh
export R=/tmp/r X=.carry/x
if [ "${1:-}" = start ]; then
  rm -rf $R $X
  mkdir -p $X $R && tar xJf .carry/pack.tar.xz -C $X
  date +%s > $R/t0
  nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv > $R/gpu.txt 2>&1
  setsid nohup bash -c "
    . dev/call_lib.sh
    O=$R
    for r in 1 2; do
      for p in llama3.2-1b qwen3-0.6b llama3.1-8b; do
        bt=1,8
        [ \$p = llama3.1-8b ] && bt=1
        bench_rows main_\${p}_r\$r $X/main 2000 --preset \$p --batch \$bt --pdl both --backend conventional
        bench_rows early_\${p}_r\$r $X/early 2000 --preset \$p --batch \$bt --pdl on --backend conventional
        bench_rows mainw1_\${p}_r\$r $X/main 2000 --preset \$p --batch \$bt --backend overlap --overlap-streams 1
        MEGAOPS_OVERLAP_PDL_CHAIN=1 bench_rows chain_\${p}_r\$r $X/chain 2000 --preset \$p --batch \$bt \
          --backend overlap --overlap-streams 1
        MEGAOPS_OVERLAP_PDL_CHAIN=1 bench_rows chainearly_\${p}_r\$r $X/chainearly 2000 --preset \$p \
          --batch \$bt --backend overlap --overlap-streams 1
      done
    done
    touch $R/bench.done
    F='Overlap.*:Presets/OverlapVsConventional.*:FullSize/OverlapFullSize.*1b*:FullSize/OverlapFullSize.*0_6b*'
    TEST_FILTER=\$F MEGAOPS_WATCHDOG_MS=2000 OUT=$R/t_chain BIN=$X/chain timeout -k 5 400 \
      scripts/gpu_run.sh tests > $R/tests_chain.log 2>&1 &
    TEST_FILTER=\$F MEGAOPS_WATCHDOG_MS=2000 OUT=$R/t_chainearly BIN=$X/chainearly timeout -k 5 400 \
      scripts/gpu_run.sh tests > $R/tests_chainearly.log 2>&1 &
    TEST_FILTER='*' MEGAOPS_WATCHDOG_MS=2000 OUT=$R/t_early BIN=$X/early timeout -k 5 400 \
      scripts/gpu_run.sh tests > $R/tests_early.log 2>&1 &
    wait
    touch $R/tests.done" >/dev/null 2>&1 < /dev/null &
  wait_s=${WAIT_S:-20}
else
  wait_s=${WAIT_S:-570}
fi
wait_done "$wait_s" bench tests
cat $R/gpu.txt
cat $R/run.log 2>/dev/null | grep -v "^== bench" | tail -80
for t in chain chainearly early; do echo "-- tests $t"; tail -6 $R/tests_$t.log 2>/dev/null; done
if [ "${1:-}" = collect ]; then
  mkdir -p "$OUT"
  tar czf "$OUT/all.tgz" -C $R .
fi
