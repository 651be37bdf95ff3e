#!/usr/bin/env bash
# Fourteenth session, device call 2, one H200, ~3 minutes: perf-notes item 29 (the graph
# prefill's fast first repeats). Build `regraph` = 86d93a8 + dev/bench-step-times.patch +
# dev/diag-regraph.patch (MEGAOPS_DIAG_REGRAPH=1 drops every instantiated step graph before each
# prefill, =2 after it). llama3.1-8b, batch 1, PDL off unless named, five repeats, every step's time.
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
export BENCH_REPEATS=5
bench_rows graph_rg0 $X/regraph 560 --preset llama3.1-8b --batch 1 --pdl off --prefill graph --step-times
MEGAOPS_DIAG_REGRAPH=1 bench_rows graph_rg1 $X/regraph 560 --preset llama3.1-8b --batch 1 --pdl off --prefill graph --step-times
MEGAOPS_DIAG_REGRAPH=2 bench_rows graph_rg2 $X/regraph 560 --preset llama3.1-8b --batch 1 --pdl off --prefill graph --step-times
bench_rows layers_rg0 $X/regraph 560 --preset llama3.1-8b --batch 1 --pdl off --prefill layers --step-times
MEGAOPS_DIAG_REGRAPH=1 bench_rows layers_rg1 $X/regraph 560 --preset llama3.1-8b --batch 1 --pdl off --prefill layers --step-times
bench_rows graph_pdl $X/regraph 560 --preset llama3.1-8b --batch 1 --pdl on --prefill graph --step-times
for f in $O/*.json; do
  python3 -c "
import json,sys,statistics as st
d=json.load(open(sys.argv[1]))
for r in d['results']:
  print(sys.argv[1].split('/')[-1], 'pdl', r['pdl'], ' '.join('%.3f'%st.mean(s) for s in r.get('step_ms',[])))
" $f | tee -a $O/run.log
done
call_finish
