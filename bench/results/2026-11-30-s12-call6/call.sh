#!/usr/bin/env bash
# Twelfth session, device call 8 (~1.5 minutes, one H200), build .carry/x/main = 5a468ed: what
# flips the 8B's 1-row decode graph between its fast and slow state (perf-notes item 29)?
#   a. --batch 32,1, layer prefill: the 32-row graph launched 127 x 7 times before any 1-row
#      step. Fast b1 rows: the 32-row graph's launches are the trigger, not the graph prefill.
#   b. --prefill graph with --gen 32 and 12 repeats: if the switch comes at the third repeat
#      again it counts prefills; if near the twelfth, 1-row launches (~380 in call 6).
#   c. --batch 1 --prefill graph, 12 repeats: does it switch back?
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
X=.carry/x
p=llama3.1-8b
BENCH_REPEATS=6 bench_rows a_b32first $X/main 200 --preset $p --batch 32,1 --pdl off
MEGAOPS_GIT_SHA=$(cat $X/main/GIT_SHA) timeout $(left 200) $X/main/megaops bench --preset $p \
  --batch 1 --pdl off --prefill graph --prompt 32 --gen 32 --repeats 12 --json $O/b_gen32.json \
  > $O/b_gen32.log 2>&1
grep -E " (off|on) +[0-9]|rror" $O/b_gen32.log | tee -a $O/run.log
BENCH_REPEATS=12 bench_rows c_graph12 $X/main 200 --preset $p --batch 1 --pdl off --prefill graph
for f in $O/*.json; do
  python3 -c "import json,sys; d=json.load(open(sys.argv[1]))
for r in d['results']: print(sys.argv[1].split('/')[-1], r['batch'], ' '.join('%.4f'%x for x in r['ms_per_token_all']))" $f |
    tee -a $O/run.log
done
call_finish
