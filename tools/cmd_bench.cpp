// `megaops bench`: decode throughput of the conventional executor, with and without PDL, and (with
// --backend overlap|both) of the overlap decode step, for a list of batch sizes. Times whole
// generations the way `generate` runs them (graph replay, token copied back every step), reports
// the median and spread over repeats, and puts every figure beside the HBM read ceiling measured in
// the same run and the bandwidth floor (weight bytes / ceiling).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "commands.h"
#include "core/error.h"
#include "core/run_options.h"
#include "io/text_file.h"
#include "models/checkpoint.h"
#include "models/model_config.h"
#include "runtime_flags.h"
#include "tp_launch.h"

#ifdef MEGAOPS_HAVE_CUDA
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "model_source.h"
#include "planner/planner.h"
#include "runtime/conventional.h"
#include "models/step_graph.h"
#endif

namespace megaops::cli {

namespace {

struct BenchOpts {
  TpOptions tp;          // --tp and the options of joining a tensor-parallel job
  RuntimeFlags runtime;  // --matmul-path, --watchdog-ms, ... (runtime_flags.h)
  std::string model, preset, batches, pdl = "both", backend = "conventional", json_out, git_sha;
  std::string prefill = "layers";
  std::string decode_loop = "stream";  // --decode-loop
  ChainOptions chain;                  // --overlap-chain-waits, --overlap-fold-*
  std::vector<std::string> plans;      // --plan, repeatable
  int prompt = 32, gen = 128, repeats = 3, overlap_streams = 3, overlap_vendor_chunks = 1;
  bool overlap_v0 = false, overlap_pdl_chain = false, step_times = false;
  uint64_t seed = 0;
  // The overlap step's regions (first op by executor name, serial or overlapped).
  struct Region {
    std::string first_op;
    bool serial = false;
  };
  // One --plan, read: its regions (empty: all conventional), backend and prediction.
  struct Plan {
    std::string path;
    std::vector<Region> regions;
    std::string backend = "conventional";
    std::optional<PrefillPath> prefill;  // a TTFT plan's; none: --prefill
    double predicted_us = -1;
  };
  std::vector<Plan> plan_runs;
};

#ifdef MEGAOPS_HAVE_CUDA
// prefill_path: --prefill, parsed by the caller before any GPU work.
int run(const BenchOpts& o, PrefillPath prefill_path) {
  const std::vector<int> batches = parse_int_list(o.batches, "--batch");
  std::vector<bool> pdl_modes;
  if (o.pdl == "both") {
    pdl_modes = {false, true};
  } else {
    pdl_modes = {o.pdl == "on"};
  }
  // Tensor parallelism (--tp): this rank's GPU and communicator; only rank 0 prints and writes.
  const bool lead = o.tp.rank <= 0;
  const std::unique_ptr<TpComm> comm = open_tp_comm(o.tp);
  const ModelSource src = open_model_source(o.model, o.preset, o.seed);
  const ModelConfig& cfg = src.cfg;
  const int max_batch = *std::max_element(batches.begin(), batches.end());

  int device = 0;
  MEGAOPS_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, device);
  if (lead) std::fprintf(stderr, "measuring the HBM read ceiling...\n");
  // In a child process, before this one loads the model: measured in this process, the ceiling
  // kernel slowed every later step (tools/cmd_hbm_ceiling.cpp says by how much).
  const double ceiling_gbps = measure_hbm_ceiling_isolated(4096, 20, device);

  ExecutorOptions eo;
  apply_runtime_flags(o.runtime, eo);
  set_tp_options(eo, o.tp, comm.get());

  eo.max_batch = max_batch;
  // A decode-graph prefill replays at most max_batch rows: room for the largest batch's prompt
  // tokens in one replay where the executor's limit allows (rows beyond the batch hold no state).
  const bool any_graph_prefill =
      prefill_path == PrefillPath::DecodeGraph ||
      std::any_of(o.plan_runs.begin(), o.plan_runs.end(),
                  [](const BenchOpts::Plan& p) { return p.prefill == PrefillPath::DecodeGraph; });
  if (any_graph_prefill) eo.max_batch = ttft_replays(max_batch * o.prompt).replay_rows;
  eo.max_seq =
      context_length("--prompt/--gen", {o.prompt, o.gen}, cfg.max_position_embeddings, src.name);
  eo.overlap_streams = o.overlap_streams;
  eo.overlap_pdl_chain = o.overlap_pdl_chain;
  apply_chain_options(o.chain, eo);
  eo.overlap_conventional_arithmetic = !o.overlap_v0;
  eo.overlap_vendor_chunks = o.overlap_vendor_chunks;
  ConventionalExecutor ex(cfg, src.weights, eo,
                          [&](size_t d, size_t t) { print_progress("loading " + src.name, d, t); });
  const double floor_ms = ex.weight_bytes() / (ceiling_gbps * 1e9) * 1e3;

  // Without --plan one run of the command line's backend; with plans one run each, on this one
  // executor (the weights load once; the regions and backend change between runs).
  std::vector<BenchOpts::Plan> runs = o.plan_runs;
  if (runs.empty()) runs.push_back({"", {}, o.backend, std::nullopt, -1});
  // Conventional runs first, then those that use the overlap executor, and within a run the
  // conventional rows of every batch before any overlap row: setting up the overlap executor asks
  // every kernel it preloads for the shared-memory carveout (DESIGN rule 1), a process-wide
  // attribute, so a conventional row measured after it would not time the step users run.
  std::stable_partition(runs.begin(), runs.end(),
                        [](const BenchOpts::Plan& p) { return p.backend == "conventional"; });
  if (runs.size() > 1 && lead && !o.json_out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.json_out, ec);
    if (ec)
      throw_input_error("--json", "", "cannot create folder " + o.json_out + ": " + ec.message());
  }
  for (const BenchOpts::Plan& plan : runs) {
    std::vector<ExecutorOptions::OverlapRegion> regions;
    for (const BenchOpts::Region& r : plan.regions) regions.push_back({r.first_op, r.serial});
    ex.set_overlap_regions(regions);
    const PrefillPath run_prefill = plan.prefill.value_or(prefill_path);
    ex.set_prefill_path(run_prefill);
    // Rows: every PDL mode for the conventional backend; one row (PDL off, which the overlap
    // step ignores anyway) for the overlap backend. The default output (conventional only) keeps
    // its historical columns.
    std::vector<std::pair<DecodeBackend, bool>> modes;
    if (plan.backend == "conventional" || plan.backend == "both")
      for (bool pdl : pdl_modes) modes.push_back({DecodeBackend::Conventional, pdl});
    if (plan.backend == "overlap" || plan.backend == "both")
      modes.push_back({DecodeBackend::Overlap, false});
    const bool show_backend = plan.backend != "conventional";
    if (lead && runs.size() > 1) std::printf("plan %s\n", plan.path.c_str());
    nlohmann::json rows = nlohmann::json::array();
    if (lead && show_backend) std::printf("%-12s ", "backend");
    if (lead)
      std::printf("%-14s %5s %4s %22s %10s %9s %8s %7s %9s\n", "model", "batch", "pdl",
                  "ms/token med [min,max]", "tok/s", "TTFT ms", "GB/s", "%ceil", "floor ms");
    // Mode by mode, conventional first (above: the overlap set-up's process-wide carveout).
    for (const auto& [backend, pdl] : modes) {
      for (int b : batches) {
        const std::vector<std::vector<int>> prompts = make_prompts(cfg, b, o.prompt, o.seed);
        ex.set_backend(backend);
        ex.set_pdl(pdl);
        std::vector<double> step_ms, ttft_ms;
        std::vector<std::vector<double>> each_step_ms;  // --step-times: every timed repeat's steps
        double gbps_sum = 0;
        for (int r = 0; r <= o.repeats && !g_interrupted; ++r) {  // r == 0 warms up and captures
          const auto t0 = std::chrono::steady_clock::now();
          ex.prefill(prompts);
          const auto t1 = std::chrono::steady_clock::now();
          size_t kv_bytes = 0;
          std::vector<double> steps;
          auto prev = t1;
          // Each step's wall time ends when its tokens are on the host.
          auto step_done = [&](int, const std::vector<int>&) {
            if (!o.step_times) return;
            const auto now = std::chrono::steady_clock::now();
            steps.push_back(std::chrono::duration<double, std::milli>(now - prev).count());
            prev = now;
          };
          if (o.decode_loop == "stream") {
            // The KV bytes each step reads, from the positions before any step runs.
            const size_t kv0 = ex.kv_bytes_read(), kv_step = ex.kv_bytes_per_step();
            for (int g = 1; g < o.gen; ++g) kv_bytes += kv0 + (g - 1) * kv_step;
            ex.decode_steps(o.gen - 1, step_done);
          } else {
            for (int g = 1; g < o.gen; ++g) {
              kv_bytes += ex.kv_bytes_read();
              step_done(g - 1, ex.decode_step());  // returns with the step's tokens on the host
            }
          }
          const auto t2 = std::chrono::steady_clock::now();
          if (r == 0) continue;
          if (o.step_times) each_step_ms.push_back(std::move(steps));
          const double dec_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
          const double per_step = dec_ms / (o.gen - 1);
          step_ms.push_back(per_step);
          ttft_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
          const double bytes = static_cast<double>(ex.weight_bytes()) * (o.gen - 1) + kv_bytes;
          gbps_sum += bytes / (dec_ms * 1e-3) / 1e9;
        }
        if (g_interrupted) return interrupt_status();
        const double med = median(step_ms);
        const double gbps = gbps_sum / step_ms.size();
        const double lo = *std::min_element(step_ms.begin(), step_ms.end());
        const double hi = *std::max_element(step_ms.begin(), step_ms.end());
        char range[64];
        std::snprintf(range, sizeof(range), "%.4f [%.4f,%.4f]", med, lo, hi);
        if (lead) {
          if (show_backend) std::printf("%-12s ", backend_name(backend));
          std::printf("%-14s %5d %4s %22s %10.1f %9.3f %8.1f %6.1f%% %9.4f\n", src.name.c_str(), b,
                      pdl ? "on" : "off", range, b * 1e3 / med, median(ttft_ms), gbps,
  eo.step_graph = build_step_graph;
                      100.0 * gbps / ceiling_gbps, floor_ms);
          std::fflush(stdout);
        }
        rows.push_back({{"batch", b},
                        {"pdl", pdl},
                        {"executor", backend_name(backend)},
                        {"ms_per_token_median", med},
                        {"ms_per_token_min", lo},
                        {"ms_per_token_max", hi},
                        {"ms_per_token_all", step_ms},
                        {"tokens_per_s", b * 1e3 / med},
                        {"ttft_ms_median", median(ttft_ms)},
                        {"achieved_gbps", gbps},
                        {"pct_of_hbm_read_ceiling", 100.0 * gbps / ceiling_gbps}});
        if (o.step_times) rows.back()["step_ms"] = each_step_ms;
      }
    }
    if (lead && !o.json_out.empty()) {
      nlohmann::json j = {{"git_sha", o.git_sha},
                          {"tp", o.tp.tp},
                          {"date_utc", utc_now()},
                          {"gpu", prop.name},
                          {"sm_count", prop.multiProcessorCount},
                          {"model", src.name},
                          {"prompt_tokens", o.prompt},
                          {"new_tokens", o.gen},
                          {"decode_loop", o.decode_loop},
                          {"repeats", o.repeats},
                          {"overlap_streams", o.overlap_streams},
                          {"overlap_pdl_chain", o.overlap_pdl_chain},
                          {"overlap_chain_waits", o.chain.waits},
                          {"overlap_fold_norms", o.chain.folds_norms()},
                          {"overlap_fold_silu", o.chain.folds_silu()},
                          {"overlap_silu_epilogue_min_inter", o.chain.silu_epilogue_min_inter()},
                          {"overlap_fold_rope", o.chain.folds_rope()},
                          {"overlap_arithmetic", o.overlap_v0 ? "v0" : "conventional"},
                          {"overlap_vendor_chunks", o.overlap_vendor_chunks},
                          {"prefill_path", prefill_path_name(run_prefill)},
                          {"max_batch", ex.options().max_batch},
                          {"overlap_regions",
                           [&] {
                             nlohmann::json a = nlohmann::json::array();
                             for (const BenchOpts::Region& r : plan.regions)
                               a.push_back({{"first_op", r.first_op}, {"serial", r.serial}});
                             return a;
                           }()},
                          {"weight_bytes", ex.weight_bytes()},
                          {"hbm_read_ceiling_gbps", ceiling_gbps},
                          {"bandwidth_floor_ms", floor_ms},
                          {"results", rows}};
      std::string out = o.json_out;
      if (!plan.path.empty()) {
        j["plan"] = plan.path;
        j["plan_predicted_us"] = plan.predicted_us;
        // Several plans: --json names a folder, one file per plan, named after the plan's file.
        if (runs.size() > 1)
          out = (std::filesystem::path(o.json_out) / std::filesystem::path(plan.path).filename())
                    .string();
      }
      std::ofstream f(out);
      if (!f) throw Error("cannot write " + out);
      f << j.dump(2) << "\n";
    }
  }
  return 0;
}
#endif

}  // namespace

// The overlap executor's name of a planner op (graph/op_graph.h names, per layer).
static std::string executor_op_name(const std::string& planner_name, int layer) {
  const std::string name = planner_name == "decode_attention" ? "attention" : planner_name;
  return layer >= 0 ? "layer " + std::to_string(layer) + " " + name : name;
}

// Reads a plan written by `megaops plan --out` and takes its model and batch where the command
// line gives none. Only what an executor can run is accepted: the serial policy with conventional
// and overlap regions. All conventional: the conventional executor. Otherwise the overlap
// executor with a barrier before each region, conventional regions serial on one stream
// (ExecutorOptions::overlap_regions); the CTA budgets come from the executor's occupancy rule,
// not from the plan. Anything else is an input error naming the field, so a validation run never
// silently measures something other than the plan.
static void apply_plan(BenchOpts& o, const std::string& path) {
  const std::string text = read_text_file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw_input_error(path, "", std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw_input_error(path, "", "expected a JSON object");
  auto field = [&](const char* name) -> const nlohmann::json& {
    if (!j.contains(name)) throw_input_error(path, name, "missing");
    return j[name];
  };
  const nlohmann::json& policy = field("policy");
  if (!policy.is_string() || policy.get<std::string>() != "serial")
    throw_input_error(
        path, "policy",
        "only 'serial' runs today (barriers between regions), found " + policy.dump());
  const nlohmann::json& regions = field("regions");
  if (!regions.is_array() || regions.empty())
    throw_input_error(path, "regions", "expected a non-empty array");
  // A TTFT plan's prefill path: "graph" replays the prompt rows through the decode step, whose
  // regions (overlap ones included) the plan gives; "layers" runs the prefill kernels.
  std::optional<PrefillPath> prefill;
  if (j.contains("prefill")) {
    const nlohmann::json& p = j["prefill"];
    prefill = parse_prefill_path(p.is_string() ? p.get<std::string>() : p.dump(), path, "prefill");
  }
  const bool decode =
      !j.contains("objective") || j["objective"] == "step" || prefill == PrefillPath::DecodeGraph;
  bool any_overlap = false;
  std::vector<BenchOpts::Region> parsed;
  for (size_t i = 0; i < regions.size(); ++i) {
    const std::string at = "regions[" + std::to_string(i) + "]";
    const nlohmann::json& reg = regions[i];
    if (!reg.is_object()) throw_input_error(path, at, "expected an object");
    const nlohmann::json b = reg.contains("backend") ? reg["backend"] : nlohmann::json();
    const std::string backend = b.is_string() ? b.get<std::string>() : "";
    if (backend != "conventional" && (backend != "overlap" || !decode))
      throw_input_error(
          path, at + ".backend",
          std::string("expected 'conventional'") +
              (decode ? " or 'overlap'" : " (the overlap step runs decode and the graph prefill)") +
              ", found " + b.dump());
    if (!reg.contains("first_op") || !reg["first_op"].is_string())
      throw_input_error(path, at + ".first_op", "expected an op name");
    if (!reg.contains("first_layer") || !reg["first_layer"].is_number_integer())
      throw_input_error(path, at + ".first_layer", "expected an integer");
    any_overlap |= backend == "overlap";
    parsed.push_back(
        {executor_op_name(reg["first_op"].get<std::string>(), reg["first_layer"].get<int>()),
         backend == "conventional"});
  }
  BenchOpts::Plan plan;
  plan.path = path;
  plan.prefill = prefill;
  if (any_overlap) {
    plan.regions = parsed;
    plan.backend = "overlap";
  } else {
    plan.backend = "conventional";
  }
  const nlohmann::json& model = field("model");
  const nlohmann::json& batch = field("batch");
  if (!model.is_string()) throw_input_error(path, "model", "expected a string");
  if (!batch.is_number_integer()) throw_input_error(path, "batch", "expected an integer");
  if (o.model.empty() && o.preset.empty()) {
    const std::string m = model.get<std::string>();
    const std::vector<std::string> presets = preset_names();
    (std::find(presets.begin(), presets.end(), m) != presets.end() ? o.preset : o.model) = m;
  } else if (!o.plan_runs.empty() &&
             model.get<std::string>() != (o.preset.empty() ? o.model : o.preset)) {
    // Several plans run on one executor: they must be of one model.
    throw_input_error(path, "model",
                      "expected '" + (o.preset.empty() ? o.model : o.preset) +
                          "' (the first plan's), found '" + model.get<std::string>() + "'");
  }
  const std::string b = std::to_string(batch.get<int>());
  if (o.batches.empty()) {
    o.batches = b;
  } else if (!o.plan_runs.empty() && o.batches != b) {
    throw_input_error(path, "batch", "expected " + o.batches + " (the first plan's), found " + b);
  }
  if (j.contains("predicted_us") && j["predicted_us"].is_number())
    plan.predicted_us = j["predicted_us"].get<double>();
  o.plan_runs.push_back(plan);
}

Runner add_bench(CLI::App& app) {
  auto o = std::make_shared<BenchOpts>();
  if (const char* sha = std::getenv("MEGAOPS_GIT_SHA")) o->git_sha = sha;
  app.add_option("--model", o->model, "Hugging Face checkpoint directory");
  app.add_option("--preset", o->preset, "random weights of a named architecture (no files)");
  app.add_option("--batch", o->batches, "batch sizes, e.g. 1,8,32 (default 1, or the plan's)");
  app.add_option("--prompt", o->prompt, "prompt tokens per sequence");
  app.add_option("--gen", o->gen, "new tokens per sequence (the first comes from prefill)");
  app.add_option("--repeats", o->repeats, "timed generations per configuration");
  app.add_option("--pdl", o->pdl, "off, on or both");
  app.add_option("--backend", o->backend,
                 "decode backend: conventional (default), overlap or both");
  app.add_option("--prefill", o->prefill,
                 "layers (default: the prefill kernels) or graph (the prompt tokens as rows of "
                 "the captured decode step, on the decode backend; TTFT of short prompts)");
  app.add_option("--overlap-streams", o->overlap_streams,
                 "W of the overlap backend: kernels live at once (1..8, default 3)");
  app.add_flag("--overlap-pdl-chain", o->overlap_pdl_chain,
               "overlap step at --overlap-streams 1 as a PDL chain: each own kernel launched "
               "with PDL, waiting on the kernel before it");
  add_chain_options(app, o->chain, "--overlap-");
  app.add_flag("--overlap-v0", o->overlap_v0,
               "overlap step of v0: every matmul on the small-m kernel, capped attention splits");
  app.add_option("--overlap-vendor-chunks", o->overlap_vendor_chunks,
                 "launches per cuBLASLt matmul of the overlap step, along N (default 1)");
  app.add_option("--decode-loop", o->decode_loop,
                 "stream (default): each step enqueued before the host reads the previous one's "
                 "tokens, as a serving loop runs them; sync: the host waits for every step's "
                 "tokens before it launches the next");
  app.add_flag("--step-times", o->step_times,
               "also write every decode step's wall time (ms, each timed repeat) to the JSON");
  add_seed_option(app, o->seed, "seed of the random weights and prompts");
  app.add_option("--json", o->json_out, "write results as JSON here");
  app.add_option("--git-sha", o->git_sha, "recorded in the JSON (default $MEGAOPS_GIT_SHA)");
  app.add_option("--plan", o->plans,
                 "run the composition in this plan (from `megaops plan --out`); repeatable: the "
                 "plans (one model and batch) run one after another on one executor, and --json "
                 "names a folder that gets one file per plan, named like the plan's file");
  add_tp_options(app, o->tp);
  add_runtime_flags(app, o->runtime);
  return [o]() -> int {
    for (const std::string& p : o->plans) apply_plan(*o, p);
    if (o->batches.empty()) o->batches = "1";
    if (o->overlap_pdl_chain && o->overlap_streams != 1)
      throw_input_error("--overlap-pdl-chain", "",
                        "needs --overlap-streams 1 (one stream carries the chain), found " +
                            std::to_string(o->overlap_streams));
    check_chain_options(o->chain, "--overlap-");
    check_one_of("--decode-loop", o->decode_loop, {"stream", "sync"});
    if (o->prompt < 1 || o->gen < 2 || o->repeats < 1)
      throw_input_error("bench", "--prompt/--gen/--repeats",
                        "expected prompt >= 1, gen >= 2, repeats >= 1");
    for (int b : parse_int_list(o->batches, "--batch"))
      if (b < 1 || b > 64)
        throw_input_error("--batch", "", "expected 1..64, found " + std::to_string(b));
    check_one_of("--pdl", o->pdl, {"off", "on", "both"});
    check_one_of("--backend", o->backend, {"conventional", "overlap", "both"});
    if (o->overlap_streams < 1 || o->overlap_streams > 8)
      throw_input_error("--overlap-streams", "",
                        "expected 1..8, found " + std::to_string(o->overlap_streams));
    if (o->overlap_vendor_chunks < 1 || o->overlap_vendor_chunks > 64)
      throw_input_error("--overlap-vendor-chunks", "",
                        "expected 1..64, found " + std::to_string(o->overlap_vendor_chunks));
    // A bad value is an error before any GPU work, on any build.
    [[maybe_unused]] const PrefillPath prefill_path = parse_prefill_path(o->prefill, "--prefill");
#ifdef MEGAOPS_HAVE_CUDA
    if (!gpu_available()) throw DeviceError("bench: no CUDA device; bench needs a GPU");
    TpRanks ranks(o->tp);  // --tp N: starts ranks 1..N-1 here, or joins a job
    const int status = run(*o, prefill_path);
    ranks.join();
    return status;
#else
    throw DeviceError("bench: this build has no CUDA support");
#endif
  };
}

}  // namespace megaops::cli
