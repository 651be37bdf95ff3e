// The GPU's ModelRunner, for the front ends that run wherever megaops runs (generate, chat, the
// Python module, serve): declared here, defined by the CUDA build (src/engine_cuda/), so the
// engine layer itself never sees a CUDA header. A build without CUDA defines the same functions to
// say so (gpu_runner_absent.cpp).
//
// Today's definition adapts the step executor (runtime/executor.h), whose KV cache is one
// contiguous block per batch slot, to the runner contract: one request at a time, its whole prompt
// in one step (engine/executor_runner.h in src/engine_cuda says what else it cannot do). The
// paged GPU runner replaces it behind the same factory.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "core/sampling.h"
#include "engine/model_runner.h"
#include "graph/plan.h"

namespace megaops {

class Checkpoint;
class Executor;          // runtime/executor.h (CUDA build)
struct ExecutorOptions;  // runtime/executor_options.h (CUDA build)

struct GpuRunnerOptions {
  int max_context = 4096;  // positions per request
  int max_batch = 1;       // requests decoded together (the adapter runs 1)
  // What the executor's own sampler draws with; a request asking for other parameters is sampled
  // on the host from the step's logits (ref::sample: the same distribution), where the executor
  // writes logits (not with greedy_in_lm_head's argmax epilogue: then it is refused).
  SamplingParams sampling{0.0f, 0, 1.0f, 0};
  // A plan to run (graph/plan.h; its regions checked against the executor's ops, errors naming
  // plan_origin); null: the executor's defaults, or what `configure` sets.
  const Plan* plan = nullptr;
  std::string plan_origin;
  // The executor's options before it is built (after the plan: runtime flags, tensor
  // parallelism), and the executor once built. Either may be empty.
  std::function<void(ExecutorOptions&)> configure;
  std::function<void(Executor&)> configure_built;
  std::function<void(size_t done, size_t total)> progress;  // weight upload, may be empty
  std::string label;  // backend() is "cuda:" + label (the plan's description)
};

// True when this build has CUDA and a device is visible to the process.
bool gpu_runner_available();

// The GPU runner over `ckpt`'s weights (uploaded as bf16; `ckpt` must outlive the call). Throws
// Error when the build or machine has no GPU, InputError on options out of range.
std::unique_ptr<ModelRunner> make_gpu_runner(const Checkpoint& ckpt, const GpuRunnerOptions& o);

}  // namespace megaops
