// What `generate` and `chat` share as clients of the engine (include/megaops/engine.h): the
// runner they run on (the GPU's when there is one, else the CPU oracle), one request driven to
// its end with its outputs streamed (SIGINT / SIGTERM abort it), and the summary line (prompt
// tokens, new tokens, TTFT, tok/s, stop reason) that llama.cpp and vLLM users expect.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/sampling.h"
#include "engine/gpu_runner.h"
#include "engine/model_runner.h"
#include "graph/plan.h"
#include "megaops/engine.h"
#include "models/checkpoint.h"

namespace megaops::cli {

// The sampling options' names on the command line.
inline constexpr SamplingFieldNames CLI_SAMPLING_NAMES{"--temperature", "--top-k", "--top-p"};

// A runner and how the CLI names it ("CPU oracle, fp32", "GPU, <plan>").
struct CliRunner {
  std::unique_ptr<ModelRunner> runner;
  std::string label;
  bool gpu = false;
};

// The CPU oracle's runner for one request at a time of at most `max_context` positions, with
// `tp` tensor-parallel ranks (reference/model.h).
CliRunner make_cpu_runner(const Checkpoint& ckpt, int max_context, int tp = 1);

// The GPU's runner when there is one and `cpu` is false (make_gpu_runner: the paged runner, one
// request at a time on `plan`, errors naming `plan_origin`; a warning on stderr where the plan was
// made for another GPU), else the CPU oracle's. `sampling` is the executor adapter's only.
CliRunner make_runner(const Checkpoint& ckpt, bool cpu, const SamplingParams& sampling,
                      int max_context, const Plan& plan, const std::string& plan_origin);

struct StreamResult {
  std::vector<int> tokens;  // new tokens, the EOS one included when it ended the run
  std::string text;         // what was streamed (cut before a stop string)
  int prompt_tokens = 0;
  double ttft_s = 0, total_s = 0;
  std::string stop_reason;  // "eos", "stop token", "stop string", "length" or "interrupted"
};

// Adds `prompt` to `engine` and steps it until the request ends, calling on_output with every
// output (text deltas are final: stop strings held back, UTF-8 complete). SIGINT or SIGTERM
// aborts the request (stop reason "interrupted"). Throws Error ("<command>: <step>: ...") when
// the request ends in an error.
StreamResult run_request(const std::string& command, Engine& engine, std::vector<int> prompt,
                         const RequestParams& params,
                         const std::function<void(const RequestOutput&)>& on_output);

// "prompt 12 tokens, 32 new tokens, TTFT 45.1 ms, 21.3 tok/s, stop: eos" for stderr.
std::string stream_summary(const StreamResult& r);

}  // namespace megaops::cli
