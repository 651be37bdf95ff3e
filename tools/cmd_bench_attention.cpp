// `megaops bench-attention`: causal prefill attention of a model's head configuration, standalone,
// on the own tensor-core kernel (flash), cuDNN's fused SDPA (cudnn, loaded at run time) and the
// scalar kernel, at several prompt lengths. Prints ms, TFLOP/s (causal FLOPs 4 T^2 H d / 2) and %
// of the bf16 tensor-core ceiling measured in the same run (a cuBLASLt GEMM 8192^3), the floor
// (FLOPs at that ceiling) and each kernel's relative difference to the first; `--json` writes
// them. A kernel that cannot run a shape (cuDNN unavailable, no plan) is a row saying why. With
// `--paged BLOCK_SIZE` it times decode attention instead, through block tables of that block size
// against the contiguous cache (kernels/attention_decode_bench.h) at each context and batch: us a
// launch, GB/s of K and V and % of the HBM read ceiling measured in the same run, and the paged
// layout's speed as a fraction of the contiguous one's (the serving target: >= 0.95).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "kernels/attention_decode_bench.h"   // pure C++
#include "kernels/attention_prefill_bench.h"  // pure C++
#include "models/model_config.h"

#ifdef MEGAOPS_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace megaops::cli {

namespace {

struct Opts {
  std::string presets = "llama3.2-1b,llama3.1-8b", tokens = "1024,4096,16384,32768",
              kernels = "flash,cudnn,flash-64,flash-128,scalar", json_out, cudnn_lib;
  int repeats = 5, scalar_repeats = 2, scalar_max_tokens = 16384, ceiling_n = 8192;
  int paged = 0;  // block size of the decode comparison; 0: the prefill table
  std::string decode_contexts = "1024,8192", decode_batches = "1,32";
  int decode_repeats = 9;
  std::string paged_orders = "shuffled";
};

PagedOrder parse_paged_order(const std::string& s) {
  if (s == "shuffled") return PagedOrder::Shuffled;
  if (s == "sequential") return PagedOrder::Sequential;
  if (s == "interleaved") return PagedOrder::Interleaved;
  throw_input_error("--paged-order", "",
                    "expected shuffled, sequential or interleaved, found '" + s + "'");
}

#ifdef MEGAOPS_HAVE_CUDA
// The JSON document's common fields around `rows`.
nlohmann::json bench_document(const char* gpu, nlohmann::json rows) {
  const char* sha = std::getenv("MEGAOPS_GIT_SHA");
  return {{"gpu", gpu},
          {"git_sha", sha ? sha : "unknown"},
          {"date_utc", utc_now()},
          {"rows", std::move(rows)}};
}

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream f(path);
  if (!f) throw Error("cannot write " + path);
  f << j.dump(1) << "\n";
}

// --paged: decode attention through block tables against the contiguous cache.
int run_paged_decode(const Opts& o, const cudaDeviceProp& prop) {
  const std::vector<std::string> presets = split_list(o.presets);
  const std::vector<int> contexts = parse_int_list(o.decode_contexts, "--decode-contexts");
  const std::vector<int> batches = parse_int_list(o.decode_batches, "--decode-batches");
  for (int x : contexts)
    if (x < 1)
      throw_input_error("--decode-contexts", "", "expected >= 1, found " + std::to_string(x));
  for (int x : batches)
    if (x < 1 || x > 65535)
      throw_input_error("--decode-batches", "", "expected 1..65535, found " + std::to_string(x));
  if (o.decode_repeats < 1) throw_input_error("--decode-repeats", "", "expected >= 1");
  std::vector<std::pair<std::string, PagedOrder>> orders;
  for (const std::string& name : split_list(o.paged_orders))
    orders.emplace_back(name, parse_paged_order(name));
  const double hbm_gbps = measure_hbm_ceiling_isolated(2048, 10, 0);
  std::printf("HBM read ceiling: %.0f GB/s; decode attention, block size %d\n", hbm_gbps, o.paged);
  std::printf("%-12s %-11s %5s %6s %10s %10s %8s %8s %7s %7s\n", "preset", "order", "batch", "ctx",
              "contig us", "paged us", "contig", "paged", "%hbm", "speed");
  nlohmann::json rows = nlohmann::json::array();
  for (const std::string& name : presets) {
    const ModelConfig c = preset_config(name);
    for (const auto& [order, kind] : orders)
      for (int batch : batches)
        for (int ctx : contexts) {
          DecodePagedBenchCase bc;
          bc.order = kind;
          bc.batch = batch;
          bc.context = ctx;
          bc.num_heads = c.num_heads;
          bc.num_kv_heads = c.num_kv_heads;
          bc.head_dim = c.head_dim;
          bc.block_size = o.paged;
          bc.repeats = o.decode_repeats;
          const DecodePagedBenchResult r = time_decode_attention_paged(bc);
          const double gbps_c = r.kv_bytes / (r.contiguous_us * 1e3);
          const double gbps_p = r.kv_bytes / (r.paged_us * 1e3);
          const double speed = r.contiguous_us / r.paged_us;  // paged speed / contiguous speed
          std::printf("%-12s %-11s %5d %6d %10.2f %10.2f %8.0f %8.0f %6.1f%% %7.3f\n", name.c_str(),
                      order.c_str(), batch, ctx, r.contiguous_us, r.paged_us, gbps_c, gbps_p,
                      100 * gbps_p / hbm_gbps, speed);
          std::fflush(stdout);
          rows.push_back({{"kind", "decode_paged"},
                          {"preset", name},
                          {"batch", batch},
                          {"context", ctx},
                          {"block_size", o.paged},
                          {"block_order", order},
                          {"num_heads", c.num_heads},
                          {"num_kv_heads", c.num_kv_heads},
                          {"head_dim", c.head_dim},
                          {"layers", r.layers},
                          {"launches_per_replay", r.launches},
                          {"kv_bytes_per_launch", r.kv_bytes},
                          {"contiguous_us", r.contiguous_us},
                          {"contiguous_us_min", r.contiguous_min_us},
                          {"contiguous_us_max", r.contiguous_max_us},
                          {"paged_us", r.paged_us},
                          {"paged_us_min", r.paged_min_us},
                          {"paged_us_max", r.paged_max_us},
                          {"contiguous_gbps", gbps_c},
                          {"paged_gbps", gbps_p},
                          {"paged_pct_hbm", 100 * gbps_p / hbm_gbps},
                          {"paged_speed_vs_contiguous", speed}});
        }
  }
  if (!o.json_out.empty()) {
    nlohmann::json j = bench_document(prop.name, rows);
    j["hbm_ceiling_gbps"] = hbm_gbps;
    j["speed"] =
        "contiguous_us / paged_us: the paged layout's speed as a fraction of the "
        "contiguous one's (median of alternated repeats)";
    write_json(o.json_out, j);
  }
  return 0;
}
#endif
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
  app.add_option("--paged", o->paged,
                 "time decode attention through block tables of this block size (a power of "
                 "two) against the contiguous cache, instead of the prefill table");
  app.add_option("--decode-contexts", o->decode_contexts,
                 "--paged: keys a sequence, comma-separated");
  app.add_option("--decode-batches", o->decode_batches, "--paged: sequences, comma-separated");
  app.add_option("--paged-order", o->paged_orders,
                 "--paged: where each sequence's blocks lie, comma-separated: shuffled (a random "
                 "permutation of the cache's blocks), sequential (each sequence's in order), "
                 "interleaved (sequences' blocks taking turns)");
  app.add_option("--decode-repeats", o->decode_repeats,
                 "--paged: timed replays of each layout (alternated; median)");
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
    if (o->paged != 0 && (o->paged < 1 || (o->paged & (o->paged - 1)) != 0 || o->paged > 4096))
      throw_input_error(
          "--paged", "",
          "expected a power of two up to 4096 (16, 32, ...), found " + std::to_string(o->paged));
    for (const std::string& order : split_list(o->paged_orders)) parse_paged_order(order);
#ifdef MEGAOPS_HAVE_CUDA
    if (!gpu_available()) throw DeviceError("bench-attention: no CUDA device; it needs a GPU");
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess)
      throw DeviceError("bench-attention: cannot read the device's properties");
    if (o->paged > 0) return run_paged_decode(*o, prop);
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
      nlohmann::json j = bench_document(prop.name, rows);
      j["gemm_ceiling_tflops"] = ceiling_tflops;
      j["gemm_ceiling_n"] = o->ceiling_n;
      j["causal_flops"] = "4 * T^2 * H * d / 2";
      j["cudnn"] = cudnn;
      write_json(o->json_out, j);
    }
    return 0;
#else
    throw DeviceError("bench-attention: this build has no CUDA support");
#endif
  };
}

}  // namespace megaops::cli
