#!/usr/bin/env bash
# Fifteenth session, device call 1, one H200, ~9 minutes. Build `pf` = d541f5d +
# dev/l2-prefetch.patch (off unless MEGAOPS_L2_PREFETCH is set: then main's step).
# Question: does prefetching the next matmul's weights into L2 on a side branch of the decode
# graph, while the small kernels between two matmuls leave HBM idle, shorten the step?
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
B=$X/pf
H="qkv=16,gu=16,down=16,lm=16"
bench_rows off_8b $B 560 --preset llama3.1-8b --batch 1 --pdl both
MEGAOPS_L2_PREFETCH="o=34" bench_rows o34_8b $B 560 --preset llama3.1-8b --batch 1 --pdl off
MEGAOPS_L2_PREFETCH="o=34,$H" bench_rows all16_8b $B 560 --preset llama3.1-8b --batch 1 --pdl both
MEGAOPS_L2_PREFETCH="o=34,$H,rows=1" bench_rows rows16_8b $B 560 --preset llama3.1-8b --batch 1 --pdl off
MEGAOPS_L2_PREFETCH="o=34,qkv=24,gu=24,down=24,lm=24" bench_rows all24_8b $B 560 --preset llama3.1-8b --batch 1 --pdl off
MEGAOPS_L2_PREFETCH="o=34,qkv=8,gu=8,down=8,lm=8" bench_rows all8_8b $B 560 --preset llama3.1-8b --batch 1 --pdl off
MEGAOPS_L2_PREFETCH="o=16" bench_rows o16_8b $B 560 --preset llama3.1-8b --batch 1 --pdl off
bench_rows off2_8b $B 560 --preset llama3.1-8b --batch 1 --pdl off
bench_rows off_1b $B 560 --preset llama3.2-1b --batch 1 --pdl both
MEGAOPS_L2_PREFETCH="o=9,qkv=13,gu=16,down=16,lm=16" bench_rows all16_1b $B 560 --preset llama3.2-1b --batch 1 --pdl both
MEGAOPS_L2_PREFETCH="o=9,qkv=13,gu=16,down=16,lm=16" bench_rows all16_06b $B 560 --preset qwen3-0.6b --batch 1 --pdl both
bench_rows off_06b $B 560 --preset qwen3-0.6b --batch 1 --pdl both
log "profile 8b off / all16"
timeout $(left 575) $B/megaops profile --preset llama3.1-8b --batch 1 --json $O/prof_off_8b.json > $O/prof_off_8b.log 2>&1
MEGAOPS_L2_PREFETCH="o=34,$H" timeout $(left 590) $B/megaops profile --preset llama3.1-8b --batch 1 --json $O/prof_all16_8b.json > $O/prof_all16_8b.log 2>&1
log "GPU tests and HF comparison (pf, prefetch off: main's step)"
BIN=$B OUT=$O/gpu timeout $(left 592) scripts/gpu_run.sh tests hf > $O/gpu_run.log 2>&1
tail -n 30 $O/gpu_run.log | tee -a $O/run.log
call_finish
