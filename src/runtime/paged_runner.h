// The GPU model runner (engine/model_runner.h) over a paged KV cache: the executor's step
// resources (runtime/executor_core.h) with each layer's cache as blocks that every kernel reads
// and writes through block tables (kernels/kv_pages.cuh), driven one engine step at a time.
//
// A step is any mix of prompt chunks and decode rows of several requests:
//   - decode rows (one-token seqs, at most max_decode_rows) run as one replay of the decode step
//     captured for their batch-size bucket (1, 2, 4, ... up to max_decode_rows), on the backend
//     the bucket's plan picks; the rows past the real ones are padding whose cache writes go to a
//     scratch block. Tokens, positions, context lengths, table rows and sampling parameters live
//     in one device region that a copy kernel at the head of the captured step refreshes from
//     pinned host memory, so the same graph replays every step;
//   - prompt chunks (PrefillPath::Layers) run packed, every request's chunk in one pass through
//     the prefill kernels (cuBLASLt GEMMs, the flash prefill attention over the paged cache), then
//     the LM head and sampler over the sampled requests' last rows; with PrefillPath::DecodeGraph
//     (and always in batch-invariant mode) the chunks' rows go through the decode buckets instead,
//     at most max_decode_rows rows a replay, a request's rows in position order.
// Each row samples with its request's own parameters and random stream (SampleRow: seed, stream
// 0, the request's sample index), so a request draws the same numbers in any batch.
//
// Batch invariance. The default path is the fastest, and a row's bits there depend on its batch:
// the matmul kernel is chosen by the batch size (the streaming kernel at 1, small-m up to 8 for
// small k, cuBLASLt above, whose algorithm is chosen per m), and decode attention's split count
// and CTA form follow the batch too. batch_invariant fixes every choice a row depends on: every
// matmul on the small-m kernel (whose per-row sums are the same for m = 1..32: one k split and
// order for 1-4 batch blocks of 8; 33-64 rows take another, so the buckets stop at 32), decode
// attention with batch 1's split count and a CTA per kv head at every batch, and prompts through
// the decode buckets (no GEMM whose algorithm depends on the chunk). Norms, RoPE, SiLU and the
// sampler are per row everywhere. A request's greedy tokens are then the same alone or beside
// others, whatever its chunking (PagedRunner.TokensSameAloneOrBatched); the cost is slower
// prompts and batches above 8.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "engine/model_runner.h"
#include "graph/model_config.h"
#include "graph/plan.h"
#include "runtime/executor_options.h"

namespace megaops {

struct PagedRunnerOptions {
  // The executor's options: step_graph (required), the watchdogs and what no plan sets. The
  // runner sets the shapes (max_batch = max_decode_rows, max_seq = max_context, prefill_chunk =
  // max_step_tokens), the cache's geometry, and from the plans the backend, PDL, overlap
  // settings, matmul dispatch and prefill path.
  ExecutorOptions executor;
  // block_size: a power of two; num_blocks >= 1, or 0: as many as fit once everything else is
  // allocated (ExecutorOptions::kv_memory_utilization and kv_max_blocks in `executor`, vLLM's
  // gpu_memory_utilization); kv_geometry() says how many that was.
  KvCacheGeometry kv;
  int max_context = 4096;      // positions per request
  int max_decode_rows = 32;    // 1..64 (1..32 batch-invariant): the largest bucket
  int max_step_tokens = 2048;  // rows (prefill + decode) of one step, >= max_decode_rows
  // Plans by the batch they were made for (Plan::batch): bucket B runs the plan whose batch is B,
  // else default_plan(B). Every plan must agree on the matmul dispatch and greedy_in_lm_head,
  // the overlap ones (PDL chain, overlap) on their overlap settings; the prefill path is bucket
  // 1's plan's. A plan with a persistent region is refused: the runner runs none yet.
  std::vector<Plan> plans;
  bool batch_invariant = false;  // see above
  // The logits of sampled seqs that set RunnerSeq::want_logits are copied to the host for
  // last_logits() (vocab floats a row, only for those rows). The LM head's greedy argmax epilogue
  // (greedy_in_lm_head) still writes every row's fp32 logits (MatmulParams::argmax_out), so a
  // plan with it serves logprobs too.
};

// The decode buckets of a runner: the powers of two below max_decode_rows, then max_decode_rows.
std::vector<int> paged_runner_buckets(int max_decode_rows);

// The runner for `opt` over the model's weights (random_filler, or a checkpoint's
// checkpoint_filler); InputError naming the field for a bad option or plan. `progress` (may be
// empty) gets (bytes done, bytes total) of the weight upload.
std::unique_ptr<ModelRunner> make_paged_runner(
    const ModelConfig& cfg, const WeightFiller& weights, PagedRunnerOptions opt,
    const std::function<void(size_t, size_t)>& progress = {});

}  // namespace megaops
