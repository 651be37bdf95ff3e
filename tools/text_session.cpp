// See text_session.h.
#include "text_session.h"

#include <chrono>
#include <cstdio>

#include "commands.h"
#include "core/error.h"
#include "engine/cpu_runner.h"
#include "graph/plan.h"

namespace megaops::cli {

CliRunner make_cpu_runner(const Checkpoint& ckpt, int max_context, int tp) {
  CpuRunnerOptions o;
  o.max_context = max_context;
  o.max_decode_rows = 1;
  o.tp = tp;
  return {std::make_unique<CpuModelRunner>(ckpt, o), "CPU oracle, fp32", false};
}

CliRunner make_runner(const Checkpoint& ckpt, bool cpu, const SamplingParams& sampling,
                      int max_context, const Plan& plan, const std::string& plan_origin) {
  if (cpu || !gpu_available()) return make_cpu_runner(ckpt, max_context);
  GpuRunnerOptions o;
  o.max_context = max_context;
  o.sampling = sampling;
  // One request at a time, decoded alone (bucket 1) on the plan, in one context's blocks.
  o.plans = {plan};
  o.plans.front().batch = 1;
  o.kv_blocks = (max_context + o.kv_block_size - 1) / o.kv_block_size;
  o.plan_origin = plan_origin;
  o.label = describe(plan);
  const std::string w = plan_gpu_warning(plan, plan_origin, gpu_device_name());
  if (!w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
  o.progress = [](size_t d, size_t t) { print_progress("loading weights", d, t); };
  return {make_gpu_runner(ckpt, o), "GPU, " + describe(plan), true};
}

StreamResult run_request(const std::string& command, Engine& engine, std::vector<int> prompt,
                         const RequestParams& params,
                         const std::function<void(const RequestOutput&)>& on_output) {
  StreamResult r;
  r.prompt_tokens = static_cast<int>(prompt.size());
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t id = engine.add_request(std::move(prompt), params);
  bool aborted = false;
  for (bool done = false; !done;) {
    if (g_interrupted && !aborted) aborted = engine.abort(id);
    for (const RequestOutput& o : engine.step()) {
      if (o.id != id) continue;
      r.tokens.insert(r.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      r.text += o.text;
      if (o.ttft_s >= 0) r.ttft_s = o.ttft_s;
      on_output(o);
      if (!o.finished) continue;
      done = true;
      if (o.finish_reason == FinishReason::Error) throw Error(command + ": " + o.stop_reason);
      r.stop_reason = o.finish_reason == FinishReason::Abort ? "interrupted" : o.stop_reason;
    }
  }
  r.total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::string stream_summary(const StreamResult& r) {
  const int n = static_cast<int>(r.tokens.size());
  // Decode speed over the tokens after the first, as llama.cpp and vLLM report it.
  const double decode_s = r.total_s - r.ttft_s;
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "prompt %d tokens, %d new tokens, TTFT %.1f ms, %.1f tok/s, stop: %s",
                r.prompt_tokens, n, r.ttft_s * 1e3,
                n > 1 && decode_s > 0 ? (n - 1) / decode_s : 0.0, r.stop_reason.c_str());
  return buf;
}

}  // namespace megaops::cli
