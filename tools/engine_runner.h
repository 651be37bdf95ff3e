// The model runner an engine command (`serve`, `bench-serve`) runs on: the paged GPU runner, or
// with --cpu or without a GPU the fp32 CPU oracle, from the same options.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "engine/model_runner.h"
#include "models/checkpoint.h"

namespace megaops::cli {

struct EngineRunnerOptions {
  std::string model, plan_file;
  bool cpu = false;
  int max_batch = 8, kv_blocks = 0, block_size = 16, max_step_tokens = 0;
  const char* batch_option = "--max-batch";  // what the command calls max_batch
  double gpu_memory_utilization = 0.9;
};

// The options every engine command takes alike: --model, --plan, --cpu, --kv-blocks,
// --gpu-memory-utilization, --block-size, --max-step-tokens (the batch is each command's own).
void add_engine_runner_options(CLI::App& app, EngineRunnerOptions& o);
// InputError naming the option whose value is out of range, or --plan beside --cpu.
void check_engine_runner_options(const EngineRunnerOptions& o);

// The runner for positions up to max_context; *label says where it runs ("GPU, <backend>" or
// "CPU oracle, fp32"). InputError naming the option when one does not fit the runner (a batch or
// block size the GPU runner cannot take, a plan with --cpu).
std::unique_ptr<ModelRunner> make_engine_runner(const EngineRunnerOptions& o,
                                                const Checkpoint& ckpt, int max_context,
                                                std::string* label);

}  // namespace megaops::cli
