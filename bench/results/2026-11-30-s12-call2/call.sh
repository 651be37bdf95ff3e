#!/usr/bin/env bash
# Twelfth session, call 2 (~3 minutes, one H200): why pdg's decode rows differed from main's in
# call 1 (llama3.1-8b PDL off 4.57 in two repeats of three vs 4.73; the small models PDL on
# +2%; the third repeat of the first configuration slow). Separates the three candidates:
#   main --batch 1,8              the baseline (max_batch 8, layer prefill)
#   main --batch 1,64             max_batch 64 with the layer prefill (buffer sizes / layout)
#   pdg  --batch 1,8              the patch's decode path with the layer prefill
#   pdg  --batch 1 --prefill graph  max_batch 32, the graph prefill
# Six repeats each, so a slow repeat shows where it falls. Same pack as dev/next-call1.sh.
. dev/call_lib.sh
export BENCH_REPEATS=6
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
X=.carry/x
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
for r in 1 2; do
  for p in llama3.2-1b qwen3-0.6b; do
    bench_rows main_b8_${p}_r$r $X/main 300 --preset $p --batch 1,8 --pdl both
    bench_rows main_b64_${p}_r$r $X/main 300 --preset $p --batch 1,64 --pdl both
    bench_rows pdg_layers_${p}_r$r $X/pdg 300 --preset $p --batch 1,8 --pdl both
    bench_rows pdg_graph_${p}_r$r $X/pdg 300 --preset $p --batch 1 --pdl both \
      --prefill graph
  done
done
p=llama3.1-8b
bench_rows main_b1_${p} $X/main 420 --preset $p --batch 1 --pdl both
bench_rows main_b64_${p} $X/main 420 --preset $p --batch 1,64 --pdl both
bench_rows pdg_layers_${p} $X/pdg 420 --preset $p --batch 1 --pdl both
bench_rows pdg_graph_${p} $X/pdg 420 --preset $p --batch 1 --pdl both --prefill graph
call_finish
