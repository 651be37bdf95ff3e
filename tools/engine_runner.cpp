// See engine_runner.h.
#include "engine_runner.h"

#include <cstdio>

#include "commands.h"
#include "core/error.h"
#include "engine/cpu_runner.h"
#include "engine/gpu_runner.h"
#include "plan_flags.h"

namespace megaops::cli {

void add_engine_runner_options(CLI::App& app, EngineRunnerOptions& o) {
  app.add_option("--model", o.model, "Hugging Face checkpoint directory")->required();
  add_plan_option(app, o.plan_file);
  app.add_flag("--cpu", o.cpu, "run on the fp32 CPU oracle even if a GPU is present");
  app.add_option("--kv-blocks", o.kv_blocks,
                 "KV cache blocks (default 0: on the GPU what fits in --gpu-memory-utilization, "
                 "at most the batch's requests of the context; on the CPU exactly that)");
  app.add_option("--gpu-memory-utilization", o.gpu_memory_utilization,
                 "fraction of the GPU's memory the weights, buffers and KV cache may take when "
                 "--kv-blocks is 0 (default 0.9, as vLLM's)");
  app.add_option("--block-size", o.block_size, "positions per KV block (default 16)");
  app.add_option("--max-step-tokens,--max-num-batched-tokens", o.max_step_tokens,
                 "token budget of one engine step, prompt chunks and decode rows (default: the "
                 "runner's)");
}

void check_engine_runner_options(const EngineRunnerOptions& o) {
  require_at_least("--kv-blocks", o.kv_blocks, 0);
  require_at_least("--block-size", o.block_size, 1);
  require_at_least("--max-step-tokens", o.max_step_tokens, 0);
  if (!(o.gpu_memory_utilization > 0 && o.gpu_memory_utilization <= 1))
    throw_input_error(
        "--gpu-memory-utilization", "",
        "expected a fraction in (0, 1], found " + std::to_string(o.gpu_memory_utilization));
  if (o.cpu && !o.plan_file.empty())
    throw_input_error("--plan", "", "cannot be combined with --cpu (the CPU oracle runs no plan)");
}

std::unique_ptr<ModelRunner> make_engine_runner(const EngineRunnerOptions& o,
                                                const Checkpoint& ckpt, int max_context,
                                                std::string* label) {
  if (!o.cpu && gpu_available()) {
    // The paged runner: --max-batch is its largest decode bucket, and the KV cache takes what the
    // weights and buffers leave of --gpu-memory-utilization unless --kv-blocks says how many.
    if (o.max_batch > 64)
      throw_input_error(o.batch_option, "",
                        "expected 1..64 on the GPU (the largest decode bucket), found " +
                            std::to_string(o.max_batch));
    if ((o.block_size & (o.block_size - 1)) != 0)
      throw_input_error("--block-size", "",
                        "expected a power of two on the GPU (16, 32, ...), found " +
                            std::to_string(o.block_size));
    GpuRunnerOptions g;
    g.max_context = max_context;
    g.max_batch = o.max_batch;
    g.max_step_tokens = o.max_step_tokens;
    g.kv_block_size = o.block_size;
    g.kv_blocks = o.kv_blocks;
    g.gpu_memory_utilization = o.gpu_memory_utilization;
    if (!o.plan_file.empty()) {
      // The plan runs the bucket of its batch; the others run their default plans.
      g.plans = {read_plan_file(o.plan_file)};
      g.plan_origin = o.plan_file;
      const std::string w = plan_gpu_warning(g.plans.front(), o.plan_file, gpu_device_name());
      if (!w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
    }
    g.label = g.plans.empty() ? describe(default_plan(o.max_batch)) : describe(g.plans.front());
    g.progress = [&](size_t d, size_t t) { print_progress("loading " + o.model, d, t); };
    std::unique_ptr<ModelRunner> runner = make_gpu_runner(ckpt, g);
    *label = std::string("GPU, ") + runner->backend();
    return runner;
  }
  if (!o.plan_file.empty()) read_plan_file(o.plan_file);  // checked, not run
  CpuRunnerOptions c;
  c.max_context = max_context;
  c.block_size = o.block_size;
  c.kv_blocks = o.kv_blocks;
  c.max_decode_rows = o.max_batch;
  c.max_step_tokens = o.max_step_tokens;
  *label = "CPU oracle, fp32";
  return std::make_unique<CpuModelRunner>(ckpt, c);
}

}  // namespace megaops::cli
