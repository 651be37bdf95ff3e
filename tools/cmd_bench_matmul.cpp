// `megaops bench-matmul`: the decode matmuls of a model, standalone, on each kernel that can run
// them (small-m, streaming, cuBLASLt), so a dispatch rule is chosen from figures instead of
// guesses. Each (shape, batch, path) is timed as the step sees it: a CUDA graph of `--launches`
// dependent launches (PDL off or on), the weights rotated through copies that together exceed the
// L2 cache several times over, so every launch streams its weights from HBM. Prints us/launch,
// achieved TB/s and % of the HBM read ceiling measured in the same run; `--json` writes them.
// With `--prefill-tokens`, the same matmuls at prefill sizes instead (m = tokens): compute-bound,
// so TFLOP/s against the bf16 tensor-core ceiling measured in the same run (a cuBLASLt GEMM of
// `--ceiling-n`^3), on the call the executor makes today and on cuBLASLt with bf16 output (and the
// residual add fused into the epilogue of o_proj and down_proj, into bf16 or the fp32 residual).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "graph/op_graph.h"
#include "models/model_config.h"
#include "models/step_graph.h"

#ifdef MEGAOPS_HAVE_CUDA
#include <cuda_runtime.h>

#endif
#include "kernels/matmul_bench.h"  // pure C++: the path names are checked without a GPU
#include "kernels/matmul_dispatch.h"
#include "kernels/prefill_gemm_bench.h"  // pure C++

namespace megaops::cli {

namespace {

struct Shape {
  std::string name;
  int n, k;
};

// The step's distinct matmuls (layer 0's and the LM head), from the op graph the planner uses.
// (Unused in a build without CUDA, where the command stops at its GPU check.)
[[maybe_unused]] std::vector<Shape> model_matmuls(const ModelConfig& c) {
  std::vector<Shape> out;
  for (const Op& op : build_decode_graph(c, "bench-matmul", 1, 1).ops)
    if (op.kind == OpKind::Matmul && op.layer <= 0)
      out.push_back({op.name, static_cast<int>(op.n), static_cast<int>(op.k)});
  return out;
}

// The prefill table of bench-matmul (--prefill-tokens): every (shape, tokens, path), and the
// GEMM ceiling first.
[[maybe_unused]] void run_prefill_gemms(const ModelConfig& cfg, const std::string& preset,
                                        const std::vector<int>& tokens,
                                        const std::vector<std::string>& paths, int ceiling_n,
                                        int repeats, const std::string& json_out,
                                        const std::string& gpu_name) {
  PrefillGemmCase ceiling;
  ceiling.m = ceiling.n = ceiling.k = ceiling_n;
  ceiling.path = "lt-best";
  ceiling.repeats = 10;
  const double ceiling_us = time_prefill_gemm(ceiling).median_us;
  const double ceiling_tflops = 2.0 * ceiling_n * ceiling_n * ceiling_n / ceiling_us * 1e-6;
  std::printf(
      "bf16 GEMM ceiling (cuBLASLt %d^3, bf16 out, best of its candidates): %.1f TFLOP/s "
      "(%.1f us)\n",
      ceiling_n, ceiling_tflops, ceiling_us);
  // alg: lt-best's winner among the heuristic's answers (0: its first, the one the others run).
  std::printf("%-13s %6s %6s %5s %-12s %10s %8s %7s %9s %3s\n", "op", "n", "k", "m", "path", "us",
              "TFLOP/s", "%ceil", "floor us", "alg");
  nlohmann::json rows = nlohmann::json::array();
  for (const Shape& sh : model_matmuls(cfg)) {
    // The residual add belongs to the projections whose output is added to the residual stream.
    const bool residual = sh.name == "o_proj" || sh.name == "down_proj";
    for (int m : tokens) {
      const double flops = 2.0 * m * sh.n * sh.k;
      const double floor_us = flops / (ceiling_tflops * 1e6);
      for (const std::string& path : paths) {
        if ((path == "lt-residual" || path == "lt-f32-residual") && !residual) continue;
        PrefillGemmCase c;
        c.m = m;
        c.n = sh.n;
        c.k = sh.k;
        c.path = path;
        c.repeats = repeats;
        const PrefillGemmTime t = time_prefill_gemm(c);
        const double tflops = flops / t.median_us * 1e-6;
        std::printf("%-13s %6d %6d %5d %-12s %10.1f %8.1f %6.1f%% %9.1f %3d\n", sh.name.c_str(),
                    sh.n, sh.k, m, path.c_str(), t.median_us, tflops, 100 * tflops / ceiling_tflops,
                    floor_us, t.algo_index);
        std::fflush(stdout);
        rows.push_back({{"op", sh.name},
                        {"n", sh.n},
                        {"k", sh.k},
                        {"m", m},
                        {"path", path},
                        {"us", t.median_us},
                        {"us_min", t.min_us},
                        {"us_max", t.max_us},
                        {"tflops", tflops},
                        {"pct_ceiling", 100 * tflops / ceiling_tflops},
                        {"floor_us", floor_us},
                        {"algo_index", t.algo_index}});
      }
    }
  }
  if (json_out.empty()) return;
  const char* sha = std::getenv("MEGAOPS_GIT_SHA");
  nlohmann::json j = {{"gpu", gpu_name},
                      {"preset", preset},
                      {"git_sha", sha ? sha : "unknown"},
                      {"date_utc", utc_now()},
                      {"mode", "prefill"},
                      {"gemm_ceiling_n", ceiling_n},
                      {"gemm_ceiling_tflops", ceiling_tflops},
                      {"rows", rows}};
  std::ofstream f(json_out);
  if (!f) throw Error("cannot write " + json_out);
  f << j.dump(1) << "\n";
}

}  // namespace

Runner add_bench_matmul(CLI::App& app) {
  struct Opts {
    std::string preset = "llama3.1-8b", batches = "1",
                paths = "small,stream,stream-bulk,cublaslt,cublaslt-tuned", stages = "0", json_out,
                prefill_tokens,
                prefill_paths = "executor,lt-bf16,lt-residual,lt-f32-residual,lt-best";
    int launches = 40, repeats = 5, ceiling_n = 8192;
    bool pdl = false;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("--preset", o->preset, "architecture whose matmul shapes are timed");
  app.add_option("--batch", o->batches, "batch sizes m, comma-separated");
  app.add_option("--paths", o->paths,
                 "kernels to time: small, stream (the cp.async ring), stream-bulk (its "
                 "bulk-copy version, sm_90; skipped elsewhere), cublaslt (the heuristic's first "
                 "answer), cublaslt-tuned (the fastest of its candidates, as the executor runs "
                 "it), read (no matmul: a plain read of the same weight bytes, the floor; never "
                 "PDL); comma-separated");
  app.add_option("--stages", o->stages,
                 "ring slots of the streaming kernel, comma-separated (0 = its default)");
  app.add_option("--launches", o->launches, "launches per graph replay");
  app.add_option("--repeats", o->repeats, "graph replays timed (median)");
  app.add_flag("--pdl", o->pdl, "launch with programmatic dependent launch");
  app.add_option("--json", o->json_out, "write the table here");
  app.add_option("--prefill-tokens", o->prefill_tokens,
                 "time the matmuls at these prefill sizes (m = tokens, comma-separated) against "
                 "the tensor-core ceiling instead of the decode table");
  app.add_option("--prefill-paths", o->prefill_paths,
                 "with --prefill-tokens: executor (MatmulContext::run, fp32 out, the prefill "
                 "step's call), lt-bf16 (cuBLASLt, bf16 out), lt-residual / lt-f32-residual "
                 "(bf16 / fp32 out += x w^T: o_proj, down_proj), lt-best (the fastest of "
                 "cuBLASLt's candidates, bf16 out); comma-separated");
  app.add_option("--ceiling-n", o->ceiling_n,
                 "with --prefill-tokens: size of the cuBLASLt GEMM that sets the ceiling");
  return [o]() -> int {
    // Options first, so a bad one gets its error line on any machine.
    const ModelConfig cfg = preset_config(o->preset);
    const std::vector<int> batches = parse_int_list(o->batches, "--batch");
    const std::vector<int> stage_list = parse_int_list(o->stages, "--stages");
    const std::vector<std::string> paths = split_list(o->paths);
    for (const std::string& p : paths)
      if (!matmul_bench_path_known(p))
        throw_input_error(
            "--paths", "",
            "expected " + matmul_bench_paths_text() + ", found '" + p + "' in '" + o->paths + "'");
    for (int m : batches)
      if (m < 1 || m > 64)
        throw_input_error("--batch", "", "expected 1..64, found " + std::to_string(m));
    for (int s : stage_list)
      if (s != 0 && (s < MATMUL_STREAM_STAGES_MIN || s > MATMUL_STREAM_STAGES_MAX))
        throw_input_error("--stages", "",
                          "expected 0 or " + std::to_string(MATMUL_STREAM_STAGES_MIN) + ".." +
                              std::to_string(MATMUL_STREAM_STAGES_MAX) + ", found " +
                              std::to_string(s));
    if (o->launches < 1)
      throw_input_error("--launches", "", "expected >= 1, found " + std::to_string(o->launches));
    if (o->repeats < 1)
      throw_input_error("--repeats", "", "expected >= 1, found " + std::to_string(o->repeats));
    std::vector<int> prefill_tokens;
    if (!o->prefill_tokens.empty())
      prefill_tokens = parse_int_list(o->prefill_tokens, "--prefill-tokens");
    for (int m : prefill_tokens)
      if (m < 1)
        throw_input_error("--prefill-tokens", "", "expected >= 1, found " + std::to_string(m));
    const std::vector<std::string> prefill_paths = split_list(o->prefill_paths);
    for (const std::string& p : prefill_paths)
      if (!prefill_gemm_path_known(p))
        throw_input_error("--prefill-paths", "",
                          "expected " + prefill_gemm_paths_text() + ", found '" + p + "'");
    if (o->ceiling_n < 256 || o->ceiling_n % 8 != 0)
      throw_input_error("--ceiling-n", "", "expected a multiple of 8, >= 256");
#ifdef MEGAOPS_HAVE_CUDA
    if (!gpu_available()) throw DeviceError("bench-matmul: no CUDA device; it needs a GPU");
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess)
      throw DeviceError("bench-matmul: cannot read the device's properties");
    if (!prefill_tokens.empty()) {
      run_prefill_gemms(cfg, o->preset, prefill_tokens, prefill_paths, o->ceiling_n,
                        std::max(o->repeats, 5), o->json_out, prop.name);
      return 0;
    }
    std::fprintf(stderr, "measuring the HBM read ceiling...\n");
    // In a child process: the ceiling kernel lengthens every later launch of the process that
    // runs it (docs/perf-notes.md item 35).
    const double ceiling_gbps = measure_hbm_ceiling_isolated(1024, 10, 0);
    nlohmann::json rows = nlohmann::json::array();
    std::printf("%-13s %6s %6s %3s %-14s %9s %8s %7s %8s\n", "op", "n", "k", "m", "path",
                "us/launch", "TB/s", "%ceil", "floor us");
    for (const Shape& sh : model_matmuls(cfg)) {
      const double w_bytes = 2.0 * sh.n * sh.k;
      const double floor_us = w_bytes / ceiling_gbps * 1e-3;
      for (int m : batches) {
        for (const std::string& path : paths) {
          const bool stream = matmul_bench_path_streams(path);
          for (int stages : stream ? stage_list : std::vector<int>{0}) {
            MatmulBenchCase c;
            c.m = m;
            c.n = sh.n;
            c.k = sh.k;
            c.path = path;
            c.stream_stages = stages;
            c.launches = o->launches;
            c.repeats = o->repeats;
            c.pdl = o->pdl;
            if (!matmul_bench_supported(c)) continue;
            const MatmulBenchTime t = time_matmul(c);
            const double tbps = w_bytes / t.median_us * 1e-6;
            const std::string label =
                stream && stages != 0 ? path + "/" + std::to_string(stages) : path;
            std::printf("%-13s %6d %6d %3d %-14s %9.2f %8.3f %6.1f%% %8.2f\n", sh.name.c_str(),
                        sh.n, sh.k, m, label.c_str(), t.median_us, tbps,
                        100 * tbps * 1e3 / ceiling_gbps, floor_us);
            std::fflush(stdout);
            rows.push_back({{"op", sh.name},
                            {"n", sh.n},
                            {"k", sh.k},
                            {"m", m},
                            {"path", path},
                            {"stages", stages},
                            {"us_per_launch", t.median_us},
                            {"us_min", t.min_us},
                            {"us_max", t.max_us},
                            {"weight_copies", t.weight_copies},
                            {"tb_per_s", tbps},
                            {"floor_us", floor_us}});
          }
        }
      }
    }
    if (!o->json_out.empty()) {
      const char* sha = std::getenv("MEGAOPS_GIT_SHA");
      nlohmann::json j = {{"gpu", prop.name},
                          {"preset", o->preset},
                          {"git_sha", sha ? sha : "unknown"},
                          {"date_utc", utc_now()},
                          {"hbm_read_ceiling_gbps", ceiling_gbps},
                          {"pdl", o->pdl},
                          {"launches_per_graph", o->launches},
                          {"rows", rows}};
      std::ofstream f(o->json_out);
      if (!f) throw Error("cannot write " + o->json_out);
      f << j.dump(1) << "\n";
    }
    return 0;
#else
    (void)cfg;
    throw DeviceError("bench-matmul: this build has no CUDA support");
#endif
  };
}

}  // namespace megaops::cli
