// The options every executor backend reads (ExecutorOptions): the shapes it allocates for, the
// decode backend and its settings, tensor parallelism, the matmul dispatch and the watchdog. Plain
// data: the tools fill it from their command-line flags (tools/runtime_flags.h), and nothing in
// the runtime reads the environment.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/run_options.h"
#include "core/sampling.h"
#include "graph/op_graph.h"
#include "kernels/matmul_settings.h"
#include "sync/error_record.h"

namespace megaops {

enum class TpReduce { Nccl, Peer };

struct ExecutorOptions {
  // The model description's step graph builder (models/step_graph.h: build_step_graph): the
  // executor runs the graphs it returns. Required.
  StepGraphBuilder step_graph = nullptr;
  int max_batch = 1;         // sequences decoded together (1..64)
  int max_seq = 2048;        // positions per sequence (prompt + generated)
  int prefill_chunk = 2048;  // most tokens per prefill chunk (capped at max_batch * max_seq)
  // The paged KV cache (the paged runner, runtime/paged_runner.h; kernels/kv_pages.cuh): with
  // kv_block_size > 0 (a power of two) each layer's cache is kv_num_blocks + 1 blocks of
  // kv_block_size positions (the last one scratch: the padding rows of a decode bucket write
  // there) instead of [max_batch, max_seq], and every cache access goes through the block table
  // of kv_table_rows rows (>= max_batch) in the step inputs (ExecutorCore::kv_table); max_seq is
  // then the positions a sequence may have. 0: the contiguous cache.
  int kv_block_size = 0;
  // The paged cache's blocks; 0: as many as fit once every other buffer is allocated, as vLLM
  // sizes its cache (gpu_memory_utilization): what is left of kv_memory_utilization x the device's
  // memory after all that is in use on it (total - free: other processes' allocations count too),
  // at most kv_max_blocks (0: no cap), each layer's K (or V) below 4 GiB. options() then holds
  // the count chosen. The rest of the device (graphs, cuBLASLt's workspace) lives in the margin.
  int kv_num_blocks = 0;
  double kv_memory_utilization = 0.9;
  int kv_max_blocks = 0;
  int kv_table_rows = 0;
  // Decode attention's split count and CTA form (DecodeAttentionParams::splits and per_head): 0 /
  // -1 choose them from the batch size; fixed, a row's attention output does not depend on the
  // other rows of its step (the paged runner's batch-invariant mode).
  int decode_attention_splits = 0;
  int decode_attention_per_head = -1;
  PrefillPath prefill_path = PrefillPath::Layers;  // DecodeGraph: not with tensor parallelism
  // The layer prefill's attention kernel (core/run_options.h). Flash stays the default until
  // cuDNN's SDPA is measured faster in situ (`megaops bench-attention` times both).
  PrefillAttention prefill_attention = PrefillAttention::Flash;
  // The cuDNN library PrefillAttention::Cudnn loads (a file name or path; empty: libcudnn.so.9
  // from the loader's search path). The CLI's --cudnn-lib sets it.
  std::string cudnn_lib;
  bool pdl = false;         // programmatic dependent launch for decode steps
  bool debug_sync = false;  // synchronise and check after every op (localises failures)
  // Greedy by default (temperature 0), as `generate` and `bench` run unless told otherwise.
  SamplingParams sampling{0.0f, 0, 1.0f, 0};
  // Greedy sampling in the LM head's epilogue (MatmulParams::argmax_out), where sampling is greedy,
  // there is no tensor parallelism and the decode step's LM head runs on the bulk streaming kernel
  // (batches 1-2 on sm_90): the sampler then reads one packed argmax a row instead of the logits
  // (which are still written). The same tokens. The sampler's op goes from 10.7 us (one CTA
  // reading 513 KB of logits from L2 in eight dependent rounds) to 0.4 us in the 1B chain's trace;
  // rows (bench/results/2026-12-01-s24-call2, one binary, ms/token at batch 1, chain): llama3.2-1b
  // 0.771-0.773 -> 0.763, qwen3-0.6b 0.723-0.724 -> 0.712-0.714. The CLI's
  // --greedy-in-lm-head 0|1 sets it.
  bool greedy_in_lm_head = true;
  // How the matmuls dispatch (kernels/matmul_settings.h; the CLI's matmul flags): the defaults are
  // the production rule, the rest developer knobs for measuring the paths in situ.
  MatmulSettings matmul;

  // Tensor parallelism (issue 6, graph/tensor_parallel.h): this executor is rank tp_rank of tp
  // and computes with its shard of the weights (heads, kv heads, intermediate features, LM head
  // rows); the O and down projections' partial outputs are all-reduced and the logits gathered
  // over tp_comm (an ncclComm_t of runtime/tp_comm.h), so every rank samples the same tokens.
  // With tp_comm set the executor takes this path also at tp = 1 (collectives of one rank: the
  // same bits as without). tp > 1 needs tp_comm; the overlap backend does not run with it yet.
  int tp = 1;
  int tp_rank = 0;
  void* tp_comm = nullptr;
  // How decode steps add the O and down projections' partial outputs over the ranks: NCCL
  // all-reduce, or Peer: each rank reads the others' partials through peer memory (CUDA IPC,
  // all ranks on one host, at most TP_PEER_MAX) in one kernel that waits on their tile counters
  // (kernels/tp_reduce.cuh). Prefill always uses NCCL.
  TpReduce tp_reduce = TpReduce::Nccl;

  DecodeBackend backend = DecodeBackend::Conventional;
  int overlap_streams = 3;  // W: live kernels at most (1..8)
  // Watchdog bound of every overlap wait in ms; -1 = DEFAULT_WATCHDOG_MS (2000), 0 = none.
  int64_t overlap_watchdog_ms = -1;
  // Watchdog bound of the TpReduce::Peer waits in ms (0 = none): ranks reach a step at
  // host-dependent times (graph capture, printing), so they get 30 s; a lost signal is still an
  // error, not a hang. The CLI's --watchdog-ms sets both bounds.
  int64_t tp_peer_watchdog_ms = 30000;
  // Back-off cap of a waiting thread's sleep in ns (0 = spin; at most MAX_WAIT_SLEEP_MAX_NS), for
  // every watchdog-bounded wait (sync/error_record.h, DEFAULT_WAIT_SLEEP_MAX_NS).
  uint32_t wait_sleep_max_ns = DEFAULT_WAIT_SLEEP_MAX_NS;
  // The overlap step computes exactly what the conventional step computes (PDL off): every matmul
  // takes the conventional step's path (cuBLASLt ones run unmodified behind a gate kernel and
  // before a signal kernel, kernels/tile_gate.cuh) and attention keeps its default split count and
  // in-kernel merge (no separate combine op). Off: the v0 step (every matmul on the small-m
  // kernel, attention splits capped by the CTA budget and merged by a combine op).
  bool overlap_conventional_arithmetic = true;
  // Vendor matmuls of the overlap step run as this many launches along N, each followed by its
  // own signal (issue 3 item 5: chunk granularity); 1 = one launch, the conventional step's bits.
  int overlap_vendor_chunks = 1;
  // Barriers inside the overlap step (a plan of `megaops plan`, issue 4): the step's ops
  // (overlap_op_names(), step_advance excluded) are cut into contiguous regions, each starting at
  // the op named first_op (the first region at "embedding", names in step order). Every op of a
  // region completes before the next region's first op starts. A serial region runs its ops one
  // at a time on one stream with full grids (the conventional composition); the others overlap on
  // the W streams with budgets for their own windows. Empty: one overlap region.
  // A persistent region (`persistent`) runs its ops as one resident launch of the region kernel
  // over a static tile schedule (runtime/persistent.h), on `cta_budget` CTAs (0: all that fit);
  // like a serial region it starts after the ops before it and completes before the ops after it.
  struct OverlapRegion {
    std::string first_op;
    bool serial = false;
    bool persistent = false;
    int cta_budget = 0;
  };
  std::vector<OverlapRegion> overlap_regions;
  // The PDL chain (overlap_streams 1 only; `--overlap-pdl-chain`): every own kernel of
  // the overlap step is launched with PDL on the one stream, so kernel k + 1's CTAs are scheduled
  // once every CTA of kernel k has called pdl_launch_dependents (after its own wait), and then wait
  // on k's tile counter instead of on k's grid completion (griddepcontrol.wait). No budget is
  // needed: a kernel is scheduled only after all CTAs of every kernel before it were, so a waiting
  // CTA's producers are resident or done (docs/overlap-design.md, What comes next, item 9). Ops
  // that wait on no counter (after a vendor GEMM, a barrier or the fork) and vendor GEMMs keep
  // plain launches: they start once everything before them on the stream has completed.
  bool overlap_pdl_chain = false;
  // How a chain op waits for the op before it: on that kernel's grid (griddepcontrol.wait, the
  // default) or on its tile counter (true). Measured (bench/results/2026-11-30-s16-call1, trace
  // of one step): a grid handoff between two megaops kernels 0.6-0.7 us, a counter handoff 1.1-1.5
  // us; qwen3-0.6b batch 1 0.848 vs 1.034 ms. Counters stay for waits on part of a tensor and
  // for the multi-stream step; the watchdog only bounds counter waits.
  bool overlap_chain_counter_waits = false;
  // In the chain, each residual add + RMSNorm whose matmul runs on the bulk streaming kernel is
  // folded into that matmul's prologue (kernels/norm_fold.cuh): the norm's op launches nothing.
  // Same bits as unfolded.
  bool overlap_fold_norms = true;
  // In the chain, SiLU·mul folded into the down projection after it where that runs on the bulk
  // streaming kernel (kernels/act_fold.cuh): SiLU·mul's op launches nothing. Same bits.
  bool overlap_fold_silu = true;
  // In the chain, SiLU·mul computed in the epilogue of the gate_up projection before it where
  // that runs on the bulk streaming kernel and the intermediate size is at least this (0:
  // wherever gate_up streams; negative: never) (kernels/act_fold.cuh SiluMulEpilogue: the kernel
  // pairs gate and up rows and writes the bf16 activation instead of gate|up): SiLU·mul's op
  // launches nothing and the down projection reads the activation as usual. Takes precedence
  // over overlap_fold_silu there. Same bits. Folded into down instead, every down CTA reads the
  // whole fp32 gate|up row, 8 * inter bytes; the default 8192 takes the epilogue where that is 64
  // KB or more. Measured (bench/results/2026-11-30-s19-call2 .. -call4, one H200, batch 1,
  // ms/token, chain with the epilogue against the fold into down): llama3.2-1b (inter 8192)
  // 0.814-0.825 against 0.840-0.845 in every call; qwen3-0.6b (inter 3072, 24 KB) 0.754-0.766
  // against 0.754-0.761, level in two calls and 1.5% slower in the third.
  int overlap_silu_epilogue_min_inter = 8192;
  // In the chain, qkv_rope folded into the decode attention after it where that runs the
  // per-query-head kernel (batches 1-2 of every preset; kernels/rope_fold.cuh): attention forms
  // q and the newest k / v rows from the qkv rows and writes those rows to the cache; qkv_rope's
  // op launches nothing. Same bits.
  bool overlap_fold_rope = true;
  // In the chain, the O projection's kernel triggers the next one (gate_up) at the top of its wait
  // instead of after it, where O runs on the streaming kernel and all of its weights fit in its
  // launch's rings (KernelFootprint::ring_bytes x CTAs): they are then in flight before attention
  // ends, HBM would idle while attention runs, and gate_up's CTAs start streaming in that time.
  // Measured (bench/results/2026-12-01-s24-call1, -call4, ms/token, batch 1, chain, rows
  // alternated): qwen3-0.6b (O 4 MB in 16 MB of rings) 0.722-0.724 -> 0.700 alone, 0.689-0.690 ->
  // 0.6625-0.663 with the weights' L2 evict_first policy; llama3.2-1b (O 8 MB in 16 MB) level
  // alone, 0.759-0.760 -> 0.752-0.757 with it (attention's cached keys then stay in L2, so
  // gate_up's stream no longer delays them); llama3.1-8b (O 33.5 MB, twice its rings) slower
  // (3.827-3.837 -> 3.868-3.878), where the rule does not take it. The CLI's
  // --chain-o-early-trigger 0|1 sets it.
  bool overlap_early_trigger_o_proj = true;
  // Test knobs (defaults off). Reverse: issue the streams' ops last stream first (consumers before
  // their producers; each stream's own order is kept, which stream semantics require). Delay: a
  // random delay in [0, max] ns before every signal, per (seed, op, CTA, step). Drop: the named op
  // (see overlap_op_names()) never signals, so its consumer's watchdog must trip.
  bool overlap_reverse_issue_order = false;
  // Test knob: persistent regions deal their tasks to CTAs round robin (RegionAssign::RoundRobin)
  // instead of by the cost model; any assignment computes the same bits.
  bool persistent_round_robin = false;
  // Ring slots (16 KB each) of a persistent region's matmul tasks: 0, the deepest ring that fits
  // (kernels/persistent_region_ops.cuh, REGION_AUTO_STAGES), or MATMUL_STREAM_STAGES_MIN..MAX.
  int persistent_stages = 0;
  // CTAs an SM of a persistent region's launch (1..REGION_MAX_CTAS_PER_SM; 0: the default,
  // kernels/persistent_region_ops.cuh): each CTA its own weight ring.
  int persistent_ctas_per_sm = 0;
  uint32_t overlap_delay_max_ns = 0;
  uint64_t overlap_delay_seed = 0;
  std::string overlap_drop_signal_op;
  // Timeline tracing of the overlap step (`megaops trace`): room for this many CTA records per
  // traced step; 0 = off (the kernels' trace hooks then cost one uniform branch each).
  uint32_t overlap_trace_capacity = 0;
};

}  // namespace megaops
