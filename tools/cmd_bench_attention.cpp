// `megaops bench-attention`: causal prefill attention of a model's head configuration, standalone,
// on the own tensor-core kernel (flash), cuDNN's fused SDPA (cudnn, loaded at run time) and the
// scalar kernel, at several prompt lengths. Prints ms, TFLOP/s (causal FLOPs 4 T^2 H d / 2) and %
// of the bf16 tensor-core ceiling measured in the same run (a cuBLASLt GEMM 8192^3), the floor
// (FLOPs at that ceiling) and each kernel's relative difference to the first; `--json` writes
// them. A kernel that cannot run a shape (cuDNN unavailable, no plan) is a row saying why.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "kernels/attention_prefill_bench.h"  // pure C++
#include "models/model_config.h"

#ifdef MEGAOPS_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace megaops::cli {

namespace {

// One kernel's row on stdout and in the JSON: ms, TFLOP/s, % of the GEMM ceiling; a kernel that
// could not run the shape says why instead.
[[maybe_unused]] nlohmann::json report_row(const std::string& preset, const AttentionBenchShape& s,
                                           const AttentionBenchTime& bt, double ceiling_tflops) {
  const double flops = attention_causal_flops(s);
  const double floor_ms = flops / (ceiling_tflops * 1e12) * 1e3;
  nlohmann::json row = {{"preset", preset},         {"tokens", s.tokens},
                        {"num_heads", s.num_heads}, {"num_kv_heads", s.num_kv_heads},
                        {"head_dim", s.head_dim},   {"kernel", bt.kernel},
                        {"floor_ms", floor_ms}};
  if (bt.kernel == "cudnn") row["build_ms"] = bt.build_ms;
  if (!bt.error.empty()) {
    std::printf("%-12s %6d %3d %3d %4d %-9s not run: %s\n", preset.c_str(), s.tokens, s.num_heads,
                s.num_kv_heads, s.head_dim, bt.kernel.c_str(), bt.error.c_str());
    std::fflush(stdout);
    row["error"] = bt.error;
    return row;
  }
  const double tflops = flops / (bt.median_ms * 1e-3) * 1e-12;
  std::printf("%-12s %6d %3d %3d %4d %-9s %9.3f %8.1f %6.1f%% %9.3f %9.2g\n", preset.c_str(),
              s.tokens, s.num_heads, s.num_kv_heads, s.head_dim, bt.kernel.c_str(), bt.median_ms,
              tflops, 100 * tflops / ceiling_tflops, floor_ms, bt.rel_diff);
  std::fflush(stdout);
  row["ms"] = bt.median_ms;
  row["ms_min"] = bt.min_ms;
  row["ms_max"] = bt.max_ms;
  row["tflops"] = tflops;
  row["pct_ceiling"] = 100 * tflops / ceiling_tflops;
  row["block_q"] = bt.block_q;
  row["rel_diff_vs_first"] = bt.rel_diff;
  return row;
}

}  // namespace

Runner add_bench_attention(CLI::App& app) {
  struct Opts {
    std::string presets = "llama3.2-1b,llama3.1-8b", tokens = "1024,4096,16384,32768",
                kernels = "flash,cudnn,flash-64,flash-128,scalar", json_out, cudnn_lib;
    int repeats = 5, scalar_repeats = 2, scalar_max_tokens = 16384, ceiling_n = 8192;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("--preset", o->presets,
                 "architectures whose head configuration is timed, "
                 "comma-separated");
  app.add_option("--tokens", o->tokens, "prompt lengths (one sequence), comma-separated");
  app.add_option("--kernels", o->kernels,
                 "flash (tensor cores, kernels/attention_prefill.cuh, its default query block), "
                 "flash-64 / flash-128 (64 / 128 query rows a CTA), cudnn (cuDNN's fused SDPA, "
                 "kernels/attention_cudnn.h), scalar (the first kernel's fallback); "
                 "comma-separated; the first is the reference of the difference column");
  app.add_option("--cudnn-lib", o->cudnn_lib,
                 "the cuDNN library the cudnn kernel loads: a file name or path (default "
                 "libcudnn.so.9 from the loader's search path)");
  app.add_option("--repeats", o->repeats, "timed launches of the flash kernels (median)");
  app.add_option("--scalar-repeats", o->scalar_repeats,
                 "timed launches of the scalar kernel (slow: ~0.3 s at 16k tokens)");
  app.add_option("--scalar-max-tokens", o->scalar_max_tokens,
                 "longest prompt the scalar kernel is timed at");
  app.add_option("--ceiling-n", o->ceiling_n, "size of the cuBLASLt GEMM that sets the ceiling");
  app.add_option("--json", o->json_out, "write the table here");
  return [o]() -> int {
    std::vector<ModelConfig> cfgs;
    const std::vector<std::string> presets = split_list(o->presets);
    for (const std::string& p : presets) cfgs.push_back(preset_config(p));
    const std::vector<int> tokens = parse_int_list(o->tokens, "--tokens");
    const std::vector<std::string> kernels = split_list(o->kernels);
    for (const std::string& k : kernels)
      if (!attention_bench_kernel_known(k))
        throw_input_error(
            "--kernels", "",
            "expected flash, flash-64, flash-128, scalar or cudnn, found '" + k + "'");
    for (int t : tokens)
      if (t < 1) throw_input_error("--tokens", "", "expected >= 1, found " + std::to_string(t));
    if (o->repeats < 1 || o->scalar_repeats < 1)
      throw_input_error("--repeats", "", "expected >= 1");
    if (o->ceiling_n < 256 || o->ceiling_n % 8 != 0)
      throw_input_error("--ceiling-n", "", "expected a multiple of 8, >= 256");
#ifdef MEGAOPS_HAVE_CUDA
    if (!gpu_available()) throw DeviceError("bench-attention: no CUDA device; it needs a GPU");
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess)
      throw DeviceError("bench-attention: cannot read the device's properties");
    const double n3 = static_cast<double>(o->ceiling_n) * o->ceiling_n * o->ceiling_n;
    const double ceiling_ms = time_gemm_ceiling_ms(o->ceiling_n, 10);
    const double ceiling_tflops = 2 * n3 / ceiling_ms * 1e-9;
    std::printf("bf16 GEMM ceiling (cuBLASLt %d^3): %.1f TFLOP/s\n", o->ceiling_n, ceiling_tflops);
    // rel diff: each kernel's output against the first kernel's, at the same inputs.
    std::printf("%-12s %6s %3s %3s %4s %-9s %9s %8s %7s %9s %9s\n", "preset", "T", "H", "KV", "d",
                "kernel", "ms", "TFLOP/s", "%ceil", "floor ms", "rel diff");
    nlohmann::json rows = nlohmann::json::array();
    AttentionBench bench(o->cudnn_lib);
    for (size_t pi = 0; pi < cfgs.size(); ++pi) {
      const ModelConfig& c = cfgs[pi];
      for (int t : tokens) {
        const AttentionBenchShape s{t, c.num_heads, c.num_kv_heads, c.head_dim};
        std::vector<std::string> ks;
        std::vector<int> reps;
        for (const std::string& k : kernels) {
          if (k == "scalar" && t > o->scalar_max_tokens) continue;
          ks.push_back(k);
          reps.push_back(k == "scalar" ? o->scalar_repeats : o->repeats);
        }
        if (ks.empty()) continue;
        const AttentionBenchResult r = bench.time(s, ks, reps);
        for (const AttentionBenchTime& bt : r.times)
          rows.push_back(report_row(presets[pi], s, bt, ceiling_tflops));
      }
    }
    const std::string cudnn = bench.cudnn_description();
    if (!cudnn.empty()) std::printf("cudnn: %s\n", cudnn.c_str());
    if (!o->json_out.empty()) {
      const char* sha = std::getenv("MEGAOPS_GIT_SHA");
      nlohmann::json j = {{"gpu", prop.name},
                          {"git_sha", sha ? sha : "unknown"},
                          {"date_utc", utc_now()},
                          {"gemm_ceiling_tflops", ceiling_tflops},
                          {"gemm_ceiling_n", o->ceiling_n},
                          {"causal_flops", "4 * T^2 * H * d / 2"},
                          {"cudnn", cudnn},
                          {"rows", rows}};
      std::ofstream f(o->json_out);
      if (!f) throw Error("cannot write " + o->json_out);
      f << j.dump(1) << "\n";
    }
    return 0;
#else
    throw DeviceError("bench-attention: this build has no CUDA support");
#endif
  };
}

}  // namespace megaops::cli
