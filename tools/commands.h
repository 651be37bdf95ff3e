// The `megaops` subcommands. Each registers its options on a CLI11 subcommand and returns a
// function that runs it; errors propagate as megaops::Error and main() turns them into one line on
// stderr and a non-zero exit.
#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"

namespace megaops {
struct ExecutorOptions;  // runtime/conventional.h
}  // namespace megaops

namespace megaops::cli {

using Runner = std::function<int()>;

Runner add_init_random(CLI::App& app);
Runner add_generate(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_check_logits(CLI::App& app);
Runner add_profile(CLI::App& app);
Runner add_trace(CLI::App& app);
Runner add_plan(CLI::App& app);
Runner add_plan_pipeline(CLI::App& app);
Runner add_stream(CLI::App& app);
Runner add_bench_matmul(CLI::App& app);
Runner add_bench_attention(CLI::App& app);
Runner add_hbm_ceiling(CLI::App& app);
Runner add_bench_boundary(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_chat(CLI::App& app);
Runner add_serve(CLI::App& app);
Runner add_bench_serve(CLI::App& app);

// InputError "<option>: expected >= lo, found value" when value < lo.
inline void require_at_least(const char* option, int64_t value, int64_t lo) {
  if (value < lo)
    throw_input_error(option, "",
                      "expected >= " + std::to_string(lo) + ", found " + std::to_string(value));
}

// The HBM read ceiling of `device` (median GB/s of `iterations` reads of `mb` MiB), measured by
// `megaops hbm-ceiling` in a child process, so the ceiling kernel never runs in the process
// that times the model (tools/cmd_hbm_ceiling.cpp says why). Throws DeviceError when it fails.
double measure_hbm_ceiling_isolated(int64_t mb, int iterations, int device);

// Set by SIGINT or SIGTERM; long loops check it and stop cleanly.
extern std::atomic<bool> g_interrupted;
// The exit status of a run stopped by that signal: 128 + its number (130 for SIGINT).
int interrupt_status();
// Thrown by work that stops because of g_interrupted once it has cleaned up after itself; main()
// prints its one line and exits with interrupt_status().
class Interrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "a,b,,c" -> {"a", "b", "", "c"}; "" -> {""} (callers reject empty items themselves).
std::vector<std::string> split_list(const std::string& text);
// "1,2,3" -> {1, 2, 3}; throws InputError naming `option` on anything else.
std::vector<int> parse_int_list(const std::string& text, const std::string& option);

// The options of the commands that run one model on the GPU (profile, trace): where the weights
// come from (a checkpoint directory or a preset with random weights), the decode shape, the seed.
struct ModelRunOptions {
  std::string model, preset;
  int batch = 1, prompt = 32;
  uint64_t seed = 0;
};
void add_model_run_options(CLI::App& app, ModelRunOptions& o);
// Throws InputError naming the option unless 1 <= batch <= 64 and prompt >= 1.
void check_model_run_options(const ModelRunOptions& o);

// The PDL chain's options (ExecutorOptions::overlap_chain_counter_waits, overlap_fold_norms,
// overlap_fold_silu, overlap_silu_epilogue_min_inter, overlap_fold_rope), shared by bench and
// trace: `prefix` + "chain-waits" grid|counter, + "fold-norms" on|off, + "fold-silu"
// auto|epilogue|on|off (epilogue: in gate_up's epilogue where that streams, else folded into
// down; on: folded into down; auto: the epilogue where ExecutorOptions' default threshold on the
// intermediate size says, else on), + "fold-rope" on|off.
struct ChainOptions {
  std::string waits = "grid", fold_norms = "on", fold_silu = "auto", fold_rope = "on";
  bool counter_waits() const { return waits == "counter"; }
  bool folds_norms() const { return fold_norms == "on"; }
  bool folds_silu() const { return fold_silu != "off"; }
  // ExecutorOptions::overlap_silu_epilogue_min_inter for fold_silu (auto: its default).
  int silu_epilogue_min_inter() const;
  bool folds_rope() const { return fold_rope == "on"; }
};
void add_chain_options(CLI::App& app, ChainOptions& o, const std::string& prefix);
// Sets the chain's fields of eo (overlap_chain_counter_waits, overlap_fold_*,
// overlap_silu_epilogue_min_inter) from o.
void apply_chain_options(const ChainOptions& o, ExecutorOptions& eo);
// Throws InputError naming `option` ("expected a, b or c, found 'value'") unless value is one of
// choices.
void check_one_of(const std::string& option, const std::string& value,
                  std::initializer_list<const char*> choices);
// Throws InputError naming the option (prefix + name) on a value outside its choices.
void check_chain_options(const ChainOptions& o, const std::string& prefix);

// The context a run needs (prompt + new tokens + ...): the sum of `parts` in 64 bits, so no
// option value can overflow it; throws InputError naming `options` and `model` unless it is in
// 1..max_positions (the model's max_position_embeddings).
int context_length(const std::string& options, std::initializer_list<int64_t> parts,
                   int max_positions, const std::string& model);

// Registers --seed on `app`: a decimal integer in 0..2^64-1 into `seed`; anything else (a sign, a
// value past 2^64-1, trailing text) is a usage error naming --seed.
CLI::Option* add_seed_option(CLI::App& app, uint64_t& seed, const std::string& help);

// The current time as "YYYY-MM-DDTHH:MM:SSZ" (UTC), for result files.
std::string utc_now();

// True when the binary has CUDA support and a device is present.
bool gpu_available();

// Prints "\r<label> NN%" to stderr (a progress line for long work); `done == total` ends the line.
void print_progress(const std::string& label, size_t done, size_t total);
// Silences print_progress (the ranks other than 0 of a tensor-parallel job).
void set_progress_quiet(bool quiet);

}  // namespace megaops::cli
