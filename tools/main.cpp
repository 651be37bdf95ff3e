// Entry point of the `megaops` command line: init-random, generate, bench, check-logits. Every
// error becomes one line on stderr and exit status 1 (2 for usage errors, 128 + the signal for
// SIGINT or SIGTERM).
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>

#include "commands.h"
#include "core/error.h"
#include "engine/gpu_runner.h"
#include "runtime/conventional.h"
#include "tp_launch.h"

namespace megaops::cli {

std::atomic<bool> g_interrupted{false};

namespace {
std::atomic<int> g_signal{0};
}  // namespace

bool gpu_available() {
  return gpu_runner_available();
}

int interrupt_status() {
  return 128 + (g_signal.load() ? g_signal.load() : SIGINT);
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  for (size_t i = 0; i <= text.size();) {
    const size_t j = std::min(text.find(',', i), text.size());
    out.push_back(text.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

std::vector<int> parse_int_list(const std::string& text, const std::string& option) {
  std::vector<int> out;
  for (const std::string& item : split_list(text)) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v < INT32_MIN || v > INT32_MAX)
      throw_input_error(
          option, "",
          "expected a comma-separated list of integers, found '" + item + "' in '" + text + "'");
    out.push_back(static_cast<int>(v));
  }
  return out;
}

void add_model_run_options(CLI::App& app, ModelRunOptions& o) {
  app.add_option("--model", o.model, "Hugging Face checkpoint directory");
  app.add_option("--preset", o.preset, "random weights of a named architecture");
  app.add_option("--batch", o.batch, "sequences decoded together");
  app.add_option("--prompt", o.prompt, "prompt tokens per sequence");
  add_seed_option(app, o.seed, "seed of the random weights and prompts");
}

void check_model_run_options(const ModelRunOptions& o) {
  if (o.batch < 1 || o.batch > 64)
    throw_input_error("--batch", "", "expected 1..64, found " + std::to_string(o.batch));
  if (o.prompt < 1)
    throw_input_error("--prompt", "", "expected >= 1, found " + std::to_string(o.prompt));
}

void add_chain_options(CLI::App& app, ChainOptions& o, const std::string& prefix) {
  app.add_option(prefix + "chain-waits", o.waits,
                 "how a chain op waits for the op before it: grid (default; griddepcontrol.wait) "
                 "or counter (its tile counter)");
  app.add_option(prefix + "fold-norms", o.fold_norms,
                 "on (default) or off: the chain folds each norm into the streaming matmul "
                 "after it");
  app.add_option(prefix + "fold-silu", o.fold_silu,
                 "auto (default), epilogue, on or off: the chain computes SiLU·mul in the "
                 "streaming gate_up projection before it (epilogue; auto: where the "
                 "intermediate size is 8192 or more) or folds it into the streaming down "
                 "projection after it (on; the rest of auto)");
  app.add_option(prefix + "fold-rope", o.fold_rope,
                 "on (default) or off: the chain folds qkv_rope into the decode attention after "
                 "it (batches 1-2)");
}

int ChainOptions::silu_epilogue_min_inter() const {
  if (fold_silu == "auto") return ExecutorOptions{}.overlap_silu_epilogue_min_inter;
  return fold_silu == "epilogue" ? 0 : -1;
}

void apply_chain_options(const ChainOptions& o, ExecutorOptions& eo) {
  eo.overlap_chain_counter_waits = o.counter_waits();
  eo.overlap_fold_norms = o.folds_norms();
  eo.overlap_fold_silu = o.folds_silu();
  eo.overlap_silu_epilogue_min_inter = o.silu_epilogue_min_inter();
  eo.overlap_fold_rope = o.folds_rope();
}

void check_one_of(const std::string& option, const std::string& value,
                  std::initializer_list<const char*> choices) {
  std::string expected;
  size_t i = 0;
  for (const char* c : choices) {
    if (value == c) return;
    expected += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + std::string(c);
    ++i;
  }
  throw_input_error(option, "", "expected " + expected + ", found '" + value + "'");
}

void check_chain_options(const ChainOptions& o, const std::string& prefix) {
  check_one_of(prefix + "chain-waits", o.waits, {"grid", "counter"});
  check_one_of(prefix + "fold-norms", o.fold_norms, {"on", "off"});
  check_one_of(prefix + "fold-silu", o.fold_silu, {"auto", "epilogue", "on", "off"});
  check_one_of(prefix + "fold-rope", o.fold_rope, {"on", "off"});
}

int context_length(const std::string& options, std::initializer_list<int64_t> parts,
                   int max_positions, const std::string& model) {
  int64_t total = 0;
  for (int64_t part : parts) total += part;  // each part an int or a size: no int64 overflow
  if (total < 1 || total > max_positions)
    throw_input_error(options, "",
                      "a context of " + std::to_string(total) + " tokens, expected 1.." +
                          std::to_string(max_positions) + " (max_position_embeddings of " + model +
                          ")");
  return static_cast<int>(total);
}

CLI::Option* add_seed_option(CLI::App& app, uint64_t& seed, const std::string& help) {
  return app.add_option_function<std::string>(
      "--seed",
      [&seed](const std::string& text) {
        const bool digits = !text.empty() && text.size() <= 20 &&
                            text.find_first_not_of("0123456789") == std::string::npos;
        errno = 0;
        const unsigned long long v = digits ? std::strtoull(text.c_str(), nullptr, 10) : 0;
        if (!digits || errno == ERANGE)
          throw CLI::ValidationError("--seed",
                                     "expected an integer in 0..18446744073709551615, "
                                     "found '" +
                                         text + "'");
        seed = v;
      },
      help);
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

namespace {
bool g_progress_quiet = false;
}  // namespace

void set_progress_quiet(bool quiet) {
  g_progress_quiet = quiet;
}

void print_progress(const std::string& label, size_t done, size_t total) {
  if (g_progress_quiet) return;
  // A terminal gets a live percentage; a log file gets one line when the work is done.
  static const bool tty = isatty(fileno(stderr));
  if (!tty) {
    if (done >= total) std::fprintf(stderr, "%s done\n", label.c_str());
    return;
  }
  static int last = -1;
  const int pct = total ? static_cast<int>(100.0 * done / total) : 100;
  if (pct == last && done != total) return;
  last = pct;
  std::fprintf(stderr, "\r%s %3d%%%s", label.c_str(), pct, done >= total ? "\n" : "");
  std::fflush(stderr);
  if (done >= total) last = -1;
}

}  // namespace megaops::cli

int main(int argc, char** argv) {
  using namespace megaops::cli;
  set_command_line(argc, argv);
  for (int sig : {SIGINT, SIGTERM})
    std::signal(sig, [](int s) {
      g_signal = s;
      g_interrupted = true;
    });
  CLI::App app{"megaops: dense decoder LLM inference (Llama 3, Qwen 3) on CUDA"};
  app.require_subcommand(1);
  std::map<CLI::App*, Runner> runners;
  auto add = [&](const char* name, const char* help, Runner (*fn)(CLI::App&)) {
    CLI::App* sub = app.add_subcommand(name, help);
    runners[sub] = fn(*sub);
  };
  add("init-random", "write a random-weight HF checkpoint of a real architecture", add_init_random);
  add("generate", "stream generated token ids for a prompt", add_generate);
  add("bench", "measure decode ms/token, tok/s, TTFT and bandwidth", add_bench);
  add("profile", "per-op GPU time of a decode step", add_profile);
  add("bench-matmul", "time a model's decode matmuls on each matmul kernel (needs a GPU)",
      add_bench_matmul);
  add("bench-attention", "time causal prefill attention against the GEMM ceiling (needs a GPU)",
      add_bench_attention);
  add("hbm-ceiling", "the GPU's HBM read ceiling in GB/s (what bench reports against)",
      add_hbm_ceiling);
  add("bench-boundary", "what a kernel boundary costs in a CUDA graph, plain and with PDL",
      add_bench_boundary);
  add("trace", "timeline of one overlap decode step as a Chrome trace (needs a GPU)", add_trace);
  add("plan", "rank barrier/overlap/split compositions from a profile (no GPU needed)", add_plan);
  add("plan-pipeline",
      "rank a streaming pipeline's compositions for time to first chunk (no GPU needed)",
      add_plan_pipeline);
  add("stream", "run a streaming pipeline, publishing audio chunks as they are ready", add_stream);
  add("check-logits", "compare logits against a reference file from HF transformers",
      add_check_logits);
  add("tokenize", "the checkpoint's tokenizer and chat template: text <-> ids, prompts",
      add_tokenize);
  add("chat", "interactive chat with the checkpoint's chat template, streaming replies", add_chat);
  add("serve", "OpenAI-compatible HTTP server over the engine (continuous batching)", add_serve);
  add("bench-serve", "the engine's offline throughput: requests at once, stepped to the end",
      add_bench_serve);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help, or the usage error on one line
    return code == 0 ? 0 : 2;
  }
  try {
    for (auto& [sub, run] : runners)
      if (sub->parsed()) return run();
  } catch (const Interrupted& e) {
    // A progress line may be open on a terminal: end it first.
    std::fprintf(stderr, "%sinterrupted: %s\n", isatty(fileno(stderr)) ? "\n" : "", e.what());
    return interrupt_status();
  } catch (const megaops::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
