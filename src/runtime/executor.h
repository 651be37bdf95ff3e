// The executor interface: load a model's weights once, then prefill a batch of prompts and decode
// steps, on whichever backend the options pick (conventional with barriers and a CUDA graph,
// optionally PDL; the multi-stream tile overlap; the PDL chain; tensor parallelism). Every backend
// runs over the same step resources (weights, KV cache, activations, streams, graph cache) and the
// same kernels.
//
// Device state that changes per step (positions, context lengths, the sampler's step counter,
// the tokens fed back) lives in device memory and is advanced by a kernel at the end of the
// captured step, so a graph replays without any host-side parameter update.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/trace_event.h"
#include "graph/model_config.h"
#include "runtime/executor_options.h"

namespace megaops {

// The weights of the deterministic random model for `seed` (random_weight_values,
// graph/model_config.h). A checkpoint's weights: checkpoint_filler (models/checkpoint.h).
WeightFiller random_filler(uint64_t seed);

class Executor {
 public:
  virtual ~Executor() = default;

  virtual const ModelConfig& config() const = 0;
  virtual const ExecutorOptions& options() const = 0;

  // Starts a new batch: runs the prompts (one per sequence, 1 <= count <= max_batch) and returns
  // the first generated token of each. Throws InputError on empty prompts, ids outside the
  // vocabulary or prompts longer than max_seq.
  virtual std::vector<int> prefill(const std::vector<std::vector<int>>& prompts) = 0;

  // One decode step for every sequence of the batch: feeds the last tokens (or `forced`, one per
  // sequence, when given) and returns the next token of each. Throws InputError when a sequence
  // would pass max_seq.
  virtual std::vector<int> decode_step(const std::vector<int>* forced = nullptr) = 0;

  // `steps` decode steps (>= 1) with the host one step behind the GPU, as vLLM's asynchronous
  // scheduling runs them: step i + 1 is enqueued before the host waits for step i's tokens (it
  // reads them on the device), so the GPU never idles on the host's round trip (graph launch,
  // synchronisation, reading the tokens step_advance wrote into mapped host memory). on_tokens(i,
  // tokens) (may be empty) gets each step's tokens in order as they reach the host, while step i +
  // 1 runs; the tokens equal those of `steps` calls of decode_step. Returns the last step's tokens.
  // Every step runs: there is no early stop (an exception from on_tokens leaves step i + 1 enqueued
  // and counted). Throws InputError before running anything when a sequence would pass max_seq.
  virtual std::vector<int> decode_steps(
      int steps,
      const std::function<void(int step, const std::vector<int>& tokens)>& on_tokens) = 0;

  // Logits [batch, vocab] of the last prefill (its last position) or decode step.
  virtual std::vector<float> last_logits() const = 0;

  // GPU time of each op in one decode step, measured inside a captured step with an event after
  // every op (PDL off: an event between two kernels removes their programmatic edge). Runs
  // `steps` decode steps (their tokens are discarded) and returns per-op times averaged over them.
  struct OpTime {
    std::string op;
    int layer = -1;  // -1 outside the decoder layers
    double us = 0;
  };
  virtual std::vector<OpTime> profile_decode_steps(int steps) = 0;

  // Switches PDL for subsequent decode steps (graphs are cached per batch size, PDL and backend).
  virtual void set_pdl(bool pdl) = 0;
  // Switches how later prefills run (ExecutorOptions::prefill_path).
  virtual void set_prefill_path(PrefillPath path) = 0;
  // Switches the layer prefill's attention kernel (ExecutorOptions::prefill_attention).
  virtual void set_prefill_attention(PrefillAttention attention) = 0;
  // Why the prefills so far ran some attention on the tensor-core kernel although
  // PrefillAttention::Cudnn was asked for (cuDNN not loadable, no plan for a shape): one line,
  // handed out once per executor (later calls return ""); "" when nothing fell back.
  virtual std::string take_prefill_attention_note() = 0;
  // Switches the decode backend for subsequent steps (the overlap state is set up on first use).
  virtual void set_backend(DecodeBackend backend) = 0;
  // Changes the injected overlap delays (tests); drops the cached overlap graphs.
  virtual void set_overlap_delay(uint32_t max_ns, uint64_t seed) = 0;
  // Replaces ExecutorOptions::overlap_regions for later overlap steps (a plan after another, on
  // one executor: bench --plan A --plan B); InputError naming the field leaves them unchanged.
  virtual void set_overlap_regions(const std::vector<ExecutorOptions::OverlapRegion>& regions) = 0;
  // Names of the overlap step's ops, indexed by op id (what the watchdog reports).
  virtual std::vector<std::string> overlap_op_names() const = 0;

  // With overlap_trace_capacity > 0: the CTA records of the overlap steps run since the last call
  // (or since setup), and starts a new recording. *dropped = records that did not fit.
  virtual std::vector<TraceEvent> take_overlap_trace(uint64_t* dropped) = 0;

  // Weight bytes a decode step streams at least once (all weights but an untied embedding table,
  // of which a step reads one row per sequence).
  virtual size_t weight_bytes() const = 0;
  // KV-cache bytes a decode step reads for the current batch at the current lengths.
  virtual size_t kv_bytes_read() const = 0;
  // How much kv_bytes_read() grows with each decode step (one position per sequence).
  virtual size_t kv_bytes_per_step() const = 0;

  virtual cudaStream_t stream() const = 0;

  // The GPU the executor runs on, as CUDA names it (cudaDeviceProp::name, "NVIDIA H200"): what a
  // plan's gpu field is compared with.
  virtual const std::string& device_name() const = 0;
};

// The executor for `opt` (today every backend runs behind ConventionalExecutor, which picks the
// decode step by ExecutorOptions::backend and the tensor-parallel path by tp_comm).
std::unique_ptr<Executor> make_executor(const ModelConfig& cfg, const WeightFiller& weights,
                                        ExecutorOptions opt,
                                        const std::function<void(size_t, size_t)>& progress = {});

}  // namespace megaops
