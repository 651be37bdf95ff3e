// The GPU's ModelRunner, for the front ends that run wherever megaops runs (generate, chat, the
// Python module, serve): declared here, defined by the CUDA build (src/engine_cuda/), so the
// engine layer itself never sees a CUDA header. A build without CUDA defines the same functions to
// say so (gpu_runner_absent.cpp).
//
// make_gpu_runner returns the paged runner (runtime/paged_runner.h): continuous batching of up to
// max_batch decode rows a step (one captured CUDA graph per batch-size bucket, each on its plan's
// backend), prompts packed and chunked beside them, every request's K/V in its own blocks of a
// paged cache sized from the device's free memory (or kv_blocks), each row sampled with its
// request's own parameters. Where the paged runner cannot run, it returns the adapter over the
// step executor instead (src/engine_cuda/executor_runner.cpp: one request a step, its whole prompt
// in one step, its own contiguous cache): under tensor parallelism (the paged cache does not run
// with it yet) and for a plan with a persistent region (the paged runner runs none yet).
// Its backend() then ends in "(executor adapter: <why>)".
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/sampling.h"
#include "engine/model_runner.h"
#include "graph/plan.h"

namespace megaops {

class Checkpoint;
class Executor;          // runtime/executor.h (CUDA build)
struct ExecutorOptions;  // runtime/executor_options.h (CUDA build)

struct GpuRunnerOptions {
  int max_context = 4096;  // positions per request
  int max_batch = 1;       // decode rows a step: the largest bucket (1..64; the adapter runs 1)
  // Rows of one step, prompt chunks and decode rows; 0: the first plan's prefill.chunk if it sets
  // one, else 2048, within max_batch..max_batch x max_context. Activation buffers scale with it.
  int max_step_tokens = 0;
  int kv_block_size = 16;  // positions per KV block (a power of two)
  // Blocks of the paged cache; 0: as many as fit in gpu_memory_utilization of the device's memory
  // once the weights and buffers are allocated (vLLM's rule), at most what the batch can hold
  // (max_batch requests of max_context: more would never be used). The runner's kv_geometry()
  // says what it got.
  int kv_blocks = 0;
  double gpu_memory_utilization = 0.9;
  // Plans by the batch they were made for (Plan::batch, PagedRunnerOptions::plans): bucket B runs
  // the plan for B, else default_plan(B); each plan's batch must be a bucket (1, 2, 4, ...,
  // max_batch). Checked against the executor's ops, errors naming plan_origin. The adapter runs
  // the first (none: the executor's defaults, or what `configure` sets).
  std::vector<Plan> plans;
  std::string plan_origin;
  // The adapter's sampler (a request asking for other parameters is sampled on the host from the
  // step's logits); the paged runner samples every row with its request's own parameters.
  SamplingParams sampling{0.0f, 0, 1.0f, 0};
  // The executor's options before it is built (runtime flags, tensor parallelism: the settings
  // no plan holds; the paged runner then applies the plans over them), and, for the adapter, the
  // executor once built. Either may be empty.
  std::function<void(ExecutorOptions&)> configure;
  std::function<void(Executor&)> configure_built;
  std::function<void(size_t done, size_t total)> progress;  // weight upload, may be empty
  // The adapter's backend(): "cuda:" + label (the plan's description) + why it is the adapter;
  // the paged runner's names each bucket's plan ("cuda:b1 pdl chain ...; b2-8 conventional ...").
  std::string label;
};

// True when this build has CUDA and a device is visible to the process.
bool gpu_runner_available();

// The GPU runner over `ckpt`'s weights (uploaded as bf16; `ckpt` must outlive the call). Throws
// Error when the build or machine has no GPU, InputError on options out of range.
std::unique_ptr<ModelRunner> make_gpu_runner(const Checkpoint& ckpt, const GpuRunnerOptions& o);

// The executor adapter whatever the options (tests; make_gpu_runner picks it only where the paged
// runner cannot run).
std::unique_ptr<ModelRunner> make_gpu_executor_adapter(const Checkpoint& ckpt,
                                                       const GpuRunnerOptions& o);

// True for the executor adapter (one request a step; its sampler draws only the parameters it was
// built with on the device, others on the host), false for the paged runner.
bool is_executor_adapter(const ModelRunner& runner);

// The CUDA device's name ("NVIDIA H100 80GB HBM3"), "" without one: for plan_gpu_warning.
std::string gpu_device_name();

}  // namespace megaops
