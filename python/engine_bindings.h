// The Python module's side of the engine (include/megaops/engine.h): the runner a module object
// runs on (the GPU's when asked for and present, else the CPU oracle's), request parameters from
// Python arguments, and megaops._LLM, the engine itself (requests added, stepped, aborted), which
// megaops.LLM (python/megaops/__init__.py) wraps with generate() and a streaming iterator.
#pragma once

#include <nanobind/nanobind.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "graph/plan.h"
#include "io/tokenizer_files.h"
#include "megaops/engine.h"
#include "models/checkpoint.h"

namespace megaops::py {

struct RunnerConfig {
  std::string device = "auto";  // "auto", "cpu" or "cuda"
  int max_context = 4096;
  int max_batch = 1;  // requests decoded in one step (the largest decode bucket on the GPU)
  // 0: on the GPU as many as fit in gpu_memory_utilization of its memory, at most max_batch
  // requests of max_context; on the CPU exactly that
  int kv_blocks = 0;
  int block_size = 16;      // positions per KV block
  int max_step_tokens = 0;  // 0: the runner's default
  double gpu_memory_utilization = 0.9;
  Plan plan;  // what the GPU runs (a file's: the bucket of its batch; the default: every bucket's)
  bool plan_from_file = false;
  std::string plan_origin;
};

// Checks device, reads the plan file (empty: the default plan for max_batch); InputError naming
// the argument otherwise.
RunnerConfig runner_config(const std::string& device, int max_context, int max_batch, int kv_blocks,
                           int block_size, int max_step_tokens, const std::string& plan_file,
                           const Checkpoint& ckpt, double gpu_memory_utilization = 0.9);

// The runner for `c` (make_gpu_runner's paged runner on the GPU); `gpu_sampling` is what the
// executor adapter's own sampler draws with, where the GPU gets the adapter. *label: "CPU oracle,
// fp32" or "GPU, " + the runner's backend().
std::unique_ptr<ModelRunner> make_runner(const Checkpoint& ckpt, const RunnerConfig& c,
                                         const SamplingParams& gpu_sampling, std::string* label);

// Request parameters from Python's arguments: sampling options left negative take
// generation_config.json's values when it samples, else greedy.
RequestParams request_params(const CheckpointText& text, int max_tokens, float temperature,
                             int top_k, float top_p, uint64_t seed,
                             const std::vector<std::string>& stop,
                             const std::vector<int>& stop_token_ids, bool ignore_eos,
                             int logprobs = -1);

// A str prompt through the tokenizer (special tokens added), or a list of ids.
std::vector<int> prompt_ids(const CheckpointText& text, nanobind::handle prompt);

// Registers megaops._LLM on the module.
void bind_llm(nanobind::module_& m);

}  // namespace megaops::py
