// The model runner: what the engine (include/megaops/engine.h) drives each step. A runner owns the
// weights and a paged KV cache and runs one step over any mix of prompt chunks (prefill) and
// newest tokens (decode) of several requests, each reading and writing its own KV blocks through a
// block table. The engine's BlockManager decides which blocks a request holds; the runner only
// reads and writes the positions it is told to.
//
// Two implementations keep one contract: the fp32 CPU oracle (engine/cpu_runner.h) and the GPU
// executor (handed over by make_gpu_runner, engine/gpu_runner.h). Invariant both keep (tested):
// for greedy sampling a request's tokens are identical whether it runs alone or beside others,
// whatever the chunking of its prompt; seeded sampling draws through
// ref::sampling_uniform(seed, 0, sample_index), so the same holds for sampled requests.
#pragma once

#include <cstdint>
#include <vector>

#include "core/sampling.h"
#include "graph/model_config.h"

namespace megaops {

// The paged KV cache's geometry: num_blocks blocks of block_size positions each, per layer, for
// all K/V heads. Block ids are 0..num_blocks-1; the engine's BlockManager owns allocation.
struct KvCacheGeometry {
  int block_size = 16;
  int num_blocks = 0;
};

// One request's rows in one engine step: a chunk of its prompt (prefill), or its newest token
// (decode). Positions [start_pos, start_pos + tokens.size()) are computed and their K/V written
// into the request's blocks (block_table[pos / block_size], slot pos % block_size); attention reads
// positions [0, start_pos + i] through the same table.
struct RunnerSeq {
  uint64_t request_id = 0;
  std::vector<int> tokens;
  int start_pos = 0;
  std::vector<int32_t> block_table;  // covers at least start_pos + tokens.size() positions
  bool sample = false;       // draw a token after the last row (false: non-final prefill chunk)
  SamplingParams sampling;   // per request (core/sampling.h); seed = the request's seed
  int sample_index = 0;      // the request's generated-token index: the RNG counter, so a
                             // request draws the same numbers whatever batch it runs in
  bool want_logits = false;  // keep the sampled row's fp32 logits for last_logits() (logprobs)
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const ModelConfig& config() const = 0;
  virtual KvCacheGeometry kv_geometry() const = 0;
  virtual int max_decode_rows() const = 0;  // most decode rows in one step (a batch bucket cap)
  virtual int max_step_tokens() const = 0;  // most rows (prefill + decode) in one step
  virtual int max_context() const = 0;      // positions per request
  // Runs one step over `seqs` (any mix of prefill chunks and decode rows, at most
  // max_step_tokens rows in all) and returns, per seq in order, the sampled token (sample == true)
  // or -1. Throws InputError naming the field on a malformed step (never UB).
  virtual std::vector<int> run(const std::vector<RunnerSeq>& seqs) = 0;
  // fp32 logits [n, vocab] of the last run's sampled seqs that set want_logits, in seq order
  // (logprobs, tests); only those rows pay the device-to-host copy.
  virtual std::vector<float> last_logits() const = 0;
  virtual const char* backend() const = 0;  // "cpu" or "cuda:<plan>"
  // True when the runner reads and writes K/V only through the block tables it is given, so
  // requests may share blocks (the engine's prefix caching); false for a runner with a cache of
  // its own (the executor adapter).
  virtual bool shares_kv_blocks() const { return false; }
};

}  // namespace megaops
